// The spec the layout tests build by hand: spec(4, 2) is tp4 x pp2, data parallel over the
// rest of the world (Layout::create derives dp).
#pragma once

#include "layout/spec.h"

namespace partrain::testing {

inline ParallelSpec spec(int tp, int pp, int ep = 1, int cp = 1) {
  ParallelSpec s;
  s.tp = tp;
  s.pp = pp;
  s.ep = ep;
  s.cp = cp;
  return s;
}

}  // namespace partrain::testing
