// util/python_str_less: Python's order of file names, for sorting them as torchvision does
// (sorted(os.scandir(...)), sorted(os.walk(...)), sorted(fnames)). Python decodes a POSIX file name
// as UTF-8 with surrogateescape and compares code points. For valid UTF-8 that is byte order; a
// byte that is not valid UTF-8 becomes U+DC80..U+DCFF, which sorts before U+E000..U+10FFFF, where
// a byte comparison puts 0x80..0xFF after every valid lead byte.
#pragma once

#include <string_view>

namespace stoker {

bool pythonStrLess(std::string_view a, std::string_view b);

struct PythonStrLess {
  bool operator()(std::string_view a, std::string_view b) const { return pythonStrLess(a, b); }
};

}  // namespace stoker
