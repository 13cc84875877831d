// The data-family SDK under its older name: plugins built against partrain 0.1 include
// this. New plugins include "partrain/data_sdk.h" (and the other families' *_sdk.h).
#ifndef PARTRAIN_PLUGIN_SDK_H_
#define PARTRAIN_PLUGIN_SDK_H_

#include "partrain/data_sdk.h"

#endif  // PARTRAIN_PLUGIN_SDK_H_
