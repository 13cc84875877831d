// See state_store.h.
#include "store/state_store.h"

#include <filesystem>

#include <fmt/format.h>
#include <rocksdb/db.h>
#include <rocksdb/options.h>
#include <rocksdb/write_batch.h>

#include "common/crc32c.h"
#include "store/store_lock.h"
#include "store/shard_file.h"

namespace partrain::store {
namespace {

namespace fs = std::filesystem;

std::string ckpt_key(int64_t step) { return fmt::format("ckpt/{:020d}", step); }

Status from_rocks(const rocksdb::Status& s, const std::string& what) {
  if (s.ok()) return Status::ok();
  if (s.IsIOError() && s.ToString().find("lock") != std::string::npos) {
    return Status::unavailable(fmt::format("{}: {}; another partrain process of this run holds it "
                                           "(only the coordinator may open the state store)", what, s.ToString()));
  }
  if (s.IsCorruption()) return Status::corruption(fmt::format("{}: {}", what, s.ToString()));
  return Status::io_error(fmt::format("{}: {}", what, s.ToString()));
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
  return static_cast<int64_t>(std::stoll(v));
}

Result<std::vector<int64_t>> StateStore::commit(const Checkpoint& c, const RunMeta& meta, int keep) {
  if (read_only_) return Status::internal("commit on a read-only state store");
  Result<std::vector<Checkpoint>> have = checkpoints();
  if (!have) return have.status();
  rocksdb::WriteBatch batch;
  batch.Put(ckpt_key(c.state.step), encode_checkpoint(c));
  batch.Put("latest", std::to_string(c.state.step));
  batch.Put("meta/version", meta.version);
  batch.Put("meta/config_hash", meta.config_hash);
  batch.Put("meta/layout", meta.layout);
  // Newest first, the new one counted: those past `keep` go in the same batch.
  std::vector<int64_t> steps{c.state.step};
  for (const Checkpoint& h : *have) {
    if (h.state.step != c.state.step) steps.push_back(h.state.step);
  }
  std::sort(steps.rbegin(), steps.rend());
  std::vector<int64_t> dropped;
  for (size_t i = static_cast<size_t>(std::max(1, keep)); i < steps.size(); ++i) {
    batch.Delete(ckpt_key(steps[i]));
    dropped.push_back(steps[i]);
  }
  rocksdb::WriteOptions wo;
  wo.sync = true;
  PARTRAIN_RETURN_IF_ERROR(from_rocks(db_->Write(wo, &batch), root_ + "/state.db: commit"));
  return dropped;
}

Result<std::vector<std::string>> remove_uncommitted(const std::string& root,
                                                    const std::vector<int64_t>& committed) {
  std::vector<std::string> removed;
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(root, ec)) {
    const int64_t step = parse_step_folder(e.path().filename().string());
    if (step < 0) continue;
    if (std::find(committed.begin(), committed.end(), step) == committed.end()) {
      fs::remove_all(e.path(), ec);
      if (ec) return Status::io_error(fmt::format("{}: cannot remove: {}", e.path().string(), ec.message()));
      removed.push_back(e.path().string());
      continue;
    }
    for (const fs::directory_entry& f : fs::directory_iterator(e.path(), ec)) {
      if (f.path().filename().string().find(".tmp.") != std::string::npos) {
        fs::remove(f.path(), ec);
        removed.push_back(f.path().string());
      }
    }
  }
  if (ec) return Status::io_error(fmt::format("{}: cannot list: {}", root, ec.message()));
  return removed;
}

Status remove_step(const std::string& root, int64_t step) {
  std::error_code ec;
  fs::remove_all(fs::path(root) / step_folder(step), ec);
  if (ec) return Status::io_error(fmt::format("{}/{}: cannot remove: {}", root, step_folder(step), ec.message()));
  return Status::ok();
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
