#include "tokenize/split.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <fmt/format.h>

namespace partrain::tokenize {

struct Splitter::Code {
  pcre2_code* re = nullptr;
  bool jit = false;
  ~Code() { pcre2_code_free(re); }
};

Splitter::Splitter(Splitter&&) noexcept = default;
Splitter& Splitter::operator=(Splitter&&) noexcept = default;
Splitter::~Splitter() = default;

Result<Splitter> Splitter::compile(const std::string& pattern) {
  int err = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* re = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                 PCRE2_UTF | PCRE2_UCP, &err, &offset, nullptr);
  if (re == nullptr) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof(msg));
    return Status::invalid(fmt::format("pre-tokenizer pattern: {} at offset {} of {}",
                                       reinterpret_cast<const char*>(msg), offset, pattern));
  }
  Splitter s;
  s.code_ = std::make_unique<Code>();
  s.code_->re = re;
  s.code_->jit = pcre2_jit_compile(re, PCRE2_JIT_COMPLETE) == 0;
  s.pattern_ = pattern;
  return s;
}

void Splitter::split(std::string_view text,
                     const std::function<void(std::string_view)>& piece) const {
  pcre2_match_data* md = pcre2_match_data_create_from_pattern(code_->re, nullptr);
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t pos = 0, covered = 0;
  while (pos < text.size()) {
    const int rc = code_->jit
                       ? pcre2_jit_match(code_->re, subject, text.size(), pos, 0, md, nullptr)
                       : pcre2_match(code_->re, subject, text.size(), pos, PCRE2_NO_UTF_CHECK, md,
                                     nullptr);
    if (rc < 0) break;  // no further match: the rest is one gap piece
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    size_t begin = ov[0], end = ov[1];
    if (end == begin) {  // an empty match: step over one character, which stays in a gap
      size_t next = begin + 1;
      while (next < text.size() && (static_cast<unsigned char>(text[next]) & 0xC0) == 0x80) ++next;
      pos = next;
      continue;
    }
    if (begin > covered) piece(text.substr(covered, begin - covered));
    piece(text.substr(begin, end - begin));
    covered = pos = end;
  }
  if (covered < text.size()) piece(text.substr(covered));
  pcre2_match_data_free(md);
}

}  // namespace partrain::tokenize
