/* The data-family ABI under its older name: this header is what plugins built against
 * partrain 0.1 include. New plugins include "partrain/data.h" (and "partrain/abi.h" for what
 * every family shares); both are included here, so old sources build unchanged. */
#ifndef PARTRAIN_PLUGIN_H_
#define PARTRAIN_PLUGIN_H_

#include "partrain/abi.h"
#include "partrain/data.h"

#endif  /* PARTRAIN_PLUGIN_H_ */
