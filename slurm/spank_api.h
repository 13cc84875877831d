// Slurm's SPANK API for C++. spank.h (22.05) declares its functions extern "C" but not
// its types or the SPANK_PLUGIN symbols, so it is included inside extern "C" here, once.
#pragma once

extern "C" {
#include <slurm/spank.h>
}
