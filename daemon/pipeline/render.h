// Drawings of a simulated schedule: an ASCII timeline for the terminal (one row per rank,
// one column per time unit) and an SVG of the same picture.
//
//   rank 0 |F0 |F1 |...|...|B0 .....|B1 .....|
//   rank 1 |...|F0 |F1 |B0 .....|B1 .....|...|
//
// A column is the largest time unit that every action's start and end are whole multiples
// of (1/v of a unit for interleaved schedules with integer costs); '.' is idle time.
#pragma once

#include <string>

#include "pipeline/schedule.h"
#include "pipeline/simulate.h"

namespace partrain::pipeline {

// The time one column stands for: the largest of 1, 1/2, 1/3, ... 1/64 (or, for longer
// actions, 2, 3, ...) that divides every start and end; the shortest action's length
// when none does.
double column_unit(const Timeline& t);

// Rows of the timeline, each ending with the rank's idle share and peak in-flight, then
// the bubble fraction of the whole pipeline.
std::string render_ascii(const Schedule& s, const Timeline& t);

// A standalone SVG document of the timeline.
std::string render_svg(const Schedule& s, const Timeline& t);

}  // namespace partrain::pipeline
