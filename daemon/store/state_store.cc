// See state_store.h.
#include "store/state_store.h"

#include <fcntl.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstdarg>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <optional>

#include <fmt/format.h>
#include <rocksdb/db.h>
#include <rocksdb/env.h>
#include <rocksdb/options.h>
#include <rocksdb/write_batch.h>

#include "common/crc32c.h"
#include "common/log.h"
#include "store/store_lock.h"
#include "store/shard_file.h"

namespace partrain::store {
namespace {

namespace fs = std::filesystem;

std::string ckpt_key(int64_t step) { return fmt::format("ckpt/{:020d}", step); }

// The process holding ROOT/state.db/LOCK (RocksDB's fcntl lock), or 0 when none is seen.
pid_t lock_holder(const std::string& db_path) {
  const int fd = ::open((db_path + "/LOCK").c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  struct flock fl {};
  fl.l_type = F_WRLCK;
  fl.l_whence = SEEK_SET;
  const int rc = ::fcntl(fd, F_GETLK, &fl);
  ::close(fd);
  return rc == 0 && fl.l_type != F_UNLCK ? fl.l_pid : 0;
}

Status from_rocks(const rocksdb::Status& s, const std::string& what) {
  if (s.ok()) return Status::ok();
  if (s.IsIOError() && s.ToString().find("lock") != std::string::npos) {
    // Two runs on one checkpoint folder: no restart cures that, so it is not retryable.
    const pid_t holder = lock_holder(what);
    return Status::invalid(fmt::format("{}: in use by another partrain run{} (only one coordinator may open a "
                                       "state store); stop that run, or give this job another [checkpoint] dir "
                                       "or run_dir", what, holder > 0 ? fmt::format(" (pid {})", holder) : ""));
  }
  // A file of the store missing (a deleted MANIFEST or SST), or one RocksDB cannot parse:
  // the store is damaged, which the coordinator answers by setting it aside.
  if (s.IsCorruption() || s.IsPathNotFound() || s.IsInvalidArgument() || s.IsNotSupported()) {
    return Status::corruption(fmt::format("{}: {}", what, s.ToString()));
  }
  return Status::io_error(fmt::format("{}: {}", what, s.ToString()));
}

// RocksDB's info log, kept off the checkpoint disk: its LOG file was one more writer there,
// and a stats line it wrote at close onto a disk a shard had filled ended the process in an
// assertion of Debian's librocksdb (exit 134, issue 31 item 19). Its fatal lines go to
// partrain's log; the rest is dropped (its errors reach the caller as a Status, and it logs
// "errors" that are none, such as a store's folder missing before it creates it). No
// exception may leave a Logger (RocksDB is not exception-safe).
class StoreLogger final : public rocksdb::Logger {
 public:
  StoreLogger() : rocksdb::Logger(rocksdb::InfoLogLevel::FATAL_LEVEL) {}
  void Logv(const char*, va_list) override {}
  void Logv(const rocksdb::InfoLogLevel level, const char* format, va_list ap) override {
    if (level != rocksdb::InfoLogLevel::FATAL_LEVEL) return;
    try {
      char line[1024];
      std::vsnprintf(line, sizeof line, format, ap);
      log::error("store", "RocksDB: {}", line);
    } catch (...) {
    }
  }
};

// What RocksDB may write beyond a batch itself, at the most, when it opens the store or
// commits: the flush of a full write buffer (1 MiB, options below) to a table file, a new
// MANIFEST (64 KiB preallocated), an OPTIONS file, a new WAL, its info LOG lines.
constexpr uint64_t kStoreHeadroom = 3ull << 19;  // 1.5 MiB

// The bytes an unprivileged writer may still use on the file system holding `dir` (or its
// nearest existing parent); nullopt when statvfs cannot tell.
std::optional<uint64_t> free_bytes(std::string dir) {
  std::error_code ec;
  while (!dir.empty() && !fs::exists(dir, ec)) dir = fs::path(dir).parent_path().string();
  struct statvfs st {};
  if (dir.empty() || ::statvfs(dir.c_str(), &st) != 0) return std::nullopt;
  return static_cast<uint64_t>(st.f_bavail) * st.f_frsize;
}

// Refuses, before RocksDB writes a byte, a write that could meet a full disk: Debian's
// librocksdb is built with assertions, and ENOSPC in the middle of opening, committing or
// closing a store can end in one (exit 134) instead of a Status. `what` says which write.
Status room_for(const std::string& db_path, const std::string& what, uint64_t bytes) {
  const std::optional<uint64_t> free = free_bytes(db_path);
  const uint64_t need = bytes + kStoreHeadroom;
  if (!free || *free >= need) return Status::ok();
  return Status::io_error(fmt::format(
      "{}: {}: the disk holding the state store is full ({} KiB free, {} KiB needed: No space left on device); "
      "nothing was written and every committed checkpoint is kept; free space on that disk and run the same "
      "command again", db_path, what, *free >> 10, (need + 1023) >> 10));
}

}  // namespace

Result<std::unique_ptr<StateStore>> StateStore::open(const std::string& root, bool read_only) {
  std::unique_ptr<StateStore> st(new StateStore());
  st->root_ = root;
  st->read_only_ = read_only;
  const std::string path = root + "/state.db";
  rocksdb::Options o;
  o.create_if_missing = !read_only;
  // A WAL cut mid-record (a crash while writing) recovers to the last whole batch.
  o.wal_recovery_mode = rocksdb::WALRecoveryMode::kPointInTimeRecovery;
  o.keep_log_file_num = 2;
  // The store holds kilobytes: no megabytes of preallocated WAL and MANIFEST that would
  // make a nearly full checkpoint disk fail on the store instead of the shard write.
  o.write_buffer_size = 1 << 20;
  o.manifest_preallocation_size = 64 << 10;
  o.allow_fallocate = false;
  o.max_open_files = 64;
  if (!read_only) {
    std::error_code ec;
    fs::create_directories(root, ec);
    if (ec) return Status::io_error(fmt::format("{}: cannot create the checkpoint folder: {}", root, ec.message()));
  } else if (!fs::exists(path)) {
    return Status::not_found(fmt::format("{}: no state store here (no checkpoint was ever committed)", path));
  }
  // Nothing is flushed at close: every commit is already in the synced WAL, so closing writes
  // nothing RocksDB could fail on (a flush on a full disk ended in an assertion).
  o.avoid_flush_during_shutdown = true;
  o.info_log = std::make_shared<StoreLogger>();
  if (!read_only) PARTRAIN_RETURN_IF_ERROR(room_for(path, "cannot open it", 0));
  rocksdb::DB* db = nullptr;
  rocksdb::Status s = read_only ? rocksdb::DB::OpenForReadOnly(o, path, &db) : rocksdb::DB::Open(o, path, &db);
  if (!read_only && s.IsIOError() && s.ToString().find("lock") != std::string::npos) {
    // Locked: broken when its recorded owner is gone, else a configuration error (store_lock.h).
    Result<bool> broken = break_stale_lock(path);
    if (!broken) return broken.status();
    s = rocksdb::DB::Open(o, path, &db);
  }
  PARTRAIN_RETURN_IF_ERROR(from_rocks(s, path));
  st->db_.reset(db);
  if (!read_only) PARTRAIN_RETURN_IF_ERROR(write_owner(path));
  return st;
}

StateStore::~StateStore() = default;

Result<std::optional<RunMeta>> StateStore::meta() const {
  RunMeta m;
  std::string* fields[] = {&m.version, &m.config_hash, &m.layout};
  const char* keys[] = {"meta/version", "meta/config_hash", "meta/layout"};
  for (int i = 0; i < 3; ++i) {
    rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), keys[i], fields[i]);
    if (s.IsNotFound()) return std::optional<RunMeta>();
    PARTRAIN_RETURN_IF_ERROR(from_rocks(s, root_ + "/state.db"));
  }
  // Stores written before it have no inputs record: nothing to compare.
  rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), "meta/inputs", &m.inputs);
  if (!s.IsNotFound()) PARTRAIN_RETURN_IF_ERROR(from_rocks(s, root_ + "/state.db"));
  return std::optional<RunMeta>(m);
}

Result<std::vector<Checkpoint>> StateStore::checkpoints() const {
  std::vector<Checkpoint> out;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions()));
  for (it->Seek("ckpt/"); it->Valid() && it->key().starts_with("ckpt/"); it->Next()) {
    Result<Checkpoint> c = decode_checkpoint(it->value().ToStringView());
    if (!c) return c.status().prefixed(root_ + "/state.db: " + it->key().ToString() + ": ");
    out.push_back(std::move(c).value());
  }
  PARTRAIN_RETURN_IF_ERROR(from_rocks(it->status(), root_ + "/state.db"));
  std::reverse(out.begin(), out.end());
  return out;
}

Result<int64_t> StateStore::latest() const {
  std::string v;
  rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), "latest", &v);
  if (s.IsNotFound()) return int64_t{-1};
  PARTRAIN_RETURN_IF_ERROR(from_rocks(s, root_ + "/state.db"));
  int64_t step = -1;
  auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), step);
  if (ec != std::errc() || p != v.data() + v.size() || step < 0) {
    return Status::corruption(fmt::format("{}/state.db: the newest-step pointer '{}' is not a step", root_, v));
  }
  return step;
}

Status StateStore::commit(const Checkpoint& c, const RunMeta& meta, const std::vector<int64_t>& drop) {
  if (read_only_) return Status::internal("commit on a read-only state store");
  rocksdb::WriteBatch batch;
  batch.Put(ckpt_key(c.state.step), encode_checkpoint(c));
  batch.Put("meta/version", meta.version);
  batch.Put("meta/config_hash", meta.config_hash);
  batch.Put("meta/layout", meta.layout);
  if (!meta.inputs.empty()) batch.Put("meta/inputs", meta.inputs);
  for (int64_t step : drop) {
    if (step != c.state.step) batch.Delete(ckpt_key(step));
  }
  // The newest pointer: this step, unless the store holds a newer one that stays.
  Result<int64_t> newest = latest();
  if (!newest) return newest.status();
  const bool newer_stays = *newest > c.state.step && std::find(drop.begin(), drop.end(), *newest) == drop.end();
  if (!newer_stays) batch.Put("latest", std::to_string(c.state.step));
  PARTRAIN_RETURN_IF_ERROR(room_for(root_ + "/state.db", fmt::format("cannot commit the checkpoint of step {}", c.state.step),
                                    batch.GetDataSize()));
  rocksdb::WriteOptions wo;
  wo.sync = true;
  return from_rocks(db_->Write(wo, &batch), root_ + "/state.db: commit");
}

Result<std::string> set_aside_store(const std::string& root) {
  const std::string from = root + "/state.db";
  const std::string base = fmt::format("{}.damaged-{}", from, static_cast<long long>(::time(nullptr)));
  std::string to = base;
  std::error_code ec;
  for (int k = 1; fs::exists(to, ec); ++k) to = fmt::format("{}-{}", base, k);
  fs::rename(from, to, ec);
  if (ec) return Status::io_error(fmt::format("{}: cannot move the damaged state store aside to {}: {}", from, to, ec.message()));
  return to;
}

std::string config_hash(const std::vector<LogicalTensor>& tensors, uint64_t seed, int global_batch,
                        int seq_len) {
  std::string text = fmt::format("seed={};global_batch={};seq_len={}", seed, global_batch, seq_len);
  for (const LogicalTensor& t : tensors) {
    text += ";" + t.name;
    for (int64_t d : t.shape) text += fmt::format(",{}", d);
  }
  return fmt::format("crc32c:{:08x}", crc32c(text.data(), text.size()));
}

}  // namespace partrain::store
