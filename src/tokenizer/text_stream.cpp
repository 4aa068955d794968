#include "tokenizer/text_stream.h"

#include <algorithm>

#include "core/utf8.h"

namespace kvlm {

namespace {
// Bytes at the end of s that start a UTF-8 sequence not yet complete (0..3).
size_t incomplete_utf8_tail(const std::string& s) {
  for (size_t back = 1; back <= std::min<size_t>(3, s.size()); ++back) {
    unsigned char c = static_cast<unsigned char>(s[s.size() - back]);
    if ((c & 0xC0) == 0x80) continue;  // continuation byte: look further back
    size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
    return need > back ? back : 0;
  }
  return 0;
}
}  // namespace

TextStream::TextStream(const Tokenizer& tok, int prev_token, std::vector<std::string> stops)
    : tok_(tok), prev_(prev_token), stops_(std::move(stops)) {
  stops_.erase(std::remove(stops_.begin(), stops_.end(), std::string()), stops_.end());
}

std::string TextStream::push(int token) {
  if (stopped_) return "";
  pending_ += tok_.decode(prev_, token);
  prev_ = token;
  return release(false);
}

std::string TextStream::flush() { return stopped_ ? "" : release(true); }

std::string TextStream::release(bool final) {
  // Earliest complete stop string: cut there, and stop.
  size_t cut = std::string::npos;
  for (const std::string& s : stops_) cut = std::min(cut, pending_.find(s));
  size_t keep = 0;
  if (cut != std::string::npos) {
    pending_.resize(cut);
    stopped_ = true;
    final = true;
  } else if (!final) {
    // Hold back the longest tail that is a proper prefix of some stop string.
    for (const std::string& s : stops_)
      for (size_t k = std::min(s.size() - 1, pending_.size()); k > keep; --k)
        if (pending_.compare(pending_.size() - k, k, s, 0, k) == 0) {
          keep = k;
          break;
        }
    keep = std::max(keep, incomplete_utf8_tail(pending_.substr(0, pending_.size() - keep)) + keep);
  }
  std::string out = pending_.substr(0, pending_.size() - keep);
  pending_.erase(0, pending_.size() - keep);
  if (final) out = utf8_sanitize(out);
  emitted_ += out;
  return out;
}

}  // namespace kvlm
