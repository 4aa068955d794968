// Strict UTF-8 (Unicode Table 3-7): no overlong forms, no surrogates, nothing above U+10FFFF.
// Tokenizers split text into valid runs and invalid bytes with this one definition, so no
// invalid byte ever reaches PCRE2 (which treats it as undefined behaviour under NO_UTF_CHECK).
#pragma once
#include <cstddef>
#include <string>

namespace kvlm {

// Length (1..4) of the well-formed UTF-8 sequence at s[i], or 0 when s[i] starts none.
size_t utf8_sequence_length(const std::string& s, size_t i);
// True when the whole string is well-formed UTF-8.
bool utf8_is_valid(const std::string& s);
// Each maximal ill-formed subpart replaced by U+FFFD, as Python's decode(errors="replace") does.
std::string utf8_sanitize(const std::string& s);

}  // namespace kvlm
