// Which checkpoint a job's start resumes from, beyond "the newest that verifies":
// [checkpoint] resume (PARTRAIN_RESUME, --resume). A run is identified by its checkpoint
// folder (by default <run_dir>/checkpoints, the run folder named after the job), so the
// same job submitted again resumes where it stopped (auto). On the job's first start,
// "never" starts over and a step number goes back to that step; a requeue or an in-job
// restart resumes auto, from what this job itself saved. Nothing that verifies is deleted:
// what a start does not want is moved aside whole.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "common/status.h"
#include "config/job_config.h"
#include "store/coordinator.h"

namespace partrain::agent {

// True on a job's first start: outside Slurm, or before its first requeue
// (SLURM_RESTART_COUNT unset or 0).
bool first_start_of_job();

// Opens the run's state store as `mode` asks (see above; later starts open it as it is):
//   auto   as it is.
//   never  the checkpoint folder, when it holds a state store or step folders, is first
//          renamed to superseded_name(root), then opened empty. The store's lock is taken
//          before the move: a folder a live run holds is refused (invalid, naming the run)
//          and stays where it is.
//   STEP   the committed checkpoint of STEP must exist and verify (else invalid, naming the
//          steps there are); when newer ones exist the folder is renamed aside as for never,
//          STEP's folder is hard-linked (copied across file systems) back and committed
//          again in a fresh store, so resume_point() picks it and no later start resumes a
//          newer one.
// Each move is logged with both names.
Result<std::unique_ptr<store::Coordinator>> open_for_resume(const store::CoordinatorOptions& options,
                                                            const config::ResumeMode& mode, bool first_start);

// ROOT.superseded-20260131T120000Z for `unix_seconds` (UTC); "-2", "-3", ... appended while
// that name exists.
std::string superseded_name(const std::string& root, int64_t unix_seconds);

}  // namespace partrain::agent
