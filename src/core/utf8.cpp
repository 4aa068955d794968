#include "core/utf8.h"

namespace kvlm {

namespace {
// Allowed range of the second byte for a lead byte (Table 3-7); later bytes are 80..BF.
bool second_ok(unsigned char lead, unsigned char b) {
  if (lead == 0xE0) return b >= 0xA0 && b <= 0xBF;  // no overlong 3-byte forms
  if (lead == 0xED) return b >= 0x80 && b <= 0x9F;  // no surrogates
  if (lead == 0xF0) return b >= 0x90 && b <= 0xBF;  // no overlong 4-byte forms
  if (lead == 0xF4) return b >= 0x80 && b <= 0x8F;  // nothing above U+10FFFF
  return b >= 0x80 && b <= 0xBF;
}
size_t expected_length(unsigned char c) {
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF) return 2;
  if (c >= 0xE0 && c <= 0xEF) return 3;
  if (c >= 0xF0 && c <= 0xF4) return 4;
  return 0;
}
// Bytes of s[i..] that form a valid prefix of a sequence (the "maximal subpart"), at least 1.
size_t maximal_subpart(const std::string& s, size_t i) {
  unsigned char lead = static_cast<unsigned char>(s[i]);
  size_t len = expected_length(lead);
  if (len <= 1) return 1;
  size_t k = 1;
  while (k < len && i + k < s.size()) {
    unsigned char b = static_cast<unsigned char>(s[i + k]);
    if (k == 1 ? !second_ok(lead, b) : (b < 0x80 || b > 0xBF)) break;
    ++k;
  }
  return k;
}
}  // namespace

size_t utf8_sequence_length(const std::string& s, size_t i) {
  if (i >= s.size()) return 0;
  unsigned char lead = static_cast<unsigned char>(s[i]);
  size_t len = expected_length(lead);
  if (len == 0 || i + len > s.size()) return 0;
  return maximal_subpart(s, i) == len || len == 1 ? len : 0;
}

bool utf8_is_valid(const std::string& s) {
  for (size_t i = 0; i < s.size();) {
    size_t n = utf8_sequence_length(s, i);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

std::string utf8_sanitize(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    size_t n = utf8_sequence_length(s, i);
    if (n > 0) {
      out.append(s, i, n);
      i += n;
    } else {
      out += "\xEF\xBF\xBD";
      i += maximal_subpart(s, i);
    }
  }
  return out;
}

}  // namespace kvlm
