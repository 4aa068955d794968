// One choice's generated text as it streams: incremental detokenization, stop strings, and
// UTF-8 held back until complete. Pure logic with no I/O, so it is tested on its own.
// A stop string is never emitted, even when it arrives split across tokens: text that could be
// the start of a stop string is held until it either completes one or cannot.
#pragma once
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace kvlm {

class TextStream {
 public:
  TextStream(const Tokenizer& tok, int prev_token, std::vector<std::string> stops);

  // Feeds one generated token; returns the text that may now be sent (possibly empty).
  // After a stop string matched, stopped() is true and further tokens are ignored.
  std::string push(int token);
  // End of generation: whatever was held back (an incomplete UTF-8 tail becomes U+FFFD).
  std::string flush();
  bool stopped() const { return stopped_; }
  const std::string& text() const { return emitted_; }  // everything sent so far

 private:
  std::string release(bool final);

  const Tokenizer& tok_;
  int prev_;
  std::vector<std::string> stops_;
  std::string pending_;  // decoded but not yet sent
  std::string emitted_;
  bool stopped_ = false;
};

}  // namespace kvlm
