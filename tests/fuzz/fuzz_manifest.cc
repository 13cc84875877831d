// Checkpoint records as the state store, the rendezvous store and a step folder's
// manifest carry them (store/manifest.h, store/folder_manifest.h): whatever decodes
// encodes back to text that decodes to the same record, and check_complete never trusts
// a range it has not checked.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "store/folder_manifest.h"
#include "store/manifest.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace partrain::store;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  partrain::Result<Checkpoint> c = decode_checkpoint(text);
  if (c) {
    const std::string once = encode_checkpoint(*c);
    partrain::Result<Checkpoint> again = decode_checkpoint(once);
    if (!again || encode_checkpoint(*again) != once) std::abort();
    (void)check_complete(c->pieces, {{"wte.weight", {7, 3}}, {"ln_f.weight", {2}}});
  }
  (void)decode_pieces(text);
  (void)decode_state(text);
  partrain::Result<FolderManifest> m = decode_folder_manifest(text, "step-000000000008/manifest");
  if (m && decode_folder_manifest(encode_folder_manifest(*m), "x").status().code() != partrain::StatusCode::kOk) {
    std::abort();
  }
  return 0;
}
