#include "error_text.hpp"

#include <string.h>

namespace ferrum_replay::common {

namespace {

// "error 0" .. "error 255", made at compile time: the text of a number the C library has none
// for needs no buffer of the caller's and no formatting (snprintf follows the locale too).
constexpr int kNumbered = 256;
struct NumberedTexts {
  char text[kNumbered][sizeof "error 255"];
};

constexpr NumberedTexts make_numbered_texts() {
  NumberedTexts texts{};
  for (int number = 0; number < kNumbered; ++number) {
    char *out = texts.text[number];
    int at = 0;
    for (const char *prefix = "error "; *prefix; ++prefix) out[at++] = *prefix;
    char digits[3];
    int count = 0;
    int rest = number;
    do {
      digits[count++] = static_cast<char>('0' + rest % 10);
      rest /= 10;
    } while (rest);
    while (count) out[at++] = digits[--count];
  }
  return texts;
}

constexpr NumberedTexts kNumberedTexts = make_numbered_texts();

}  // namespace

const char *error_text(int errnum) {
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 32))
  // Built against glibc 2.32 or later, the libraries need it at run time anyway (they need
  // GLIBC_2.34 symbols), so no weak look-up is needed.
  if (const char *text = strerrordesc_np(errnum)) return text;
#endif
  if (errnum >= 0 && errnum < kNumbered) return kNumberedTexts.text[errnum];
  return "error (a number out of range)";
}

}  // namespace ferrum_replay::common
