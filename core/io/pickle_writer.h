// io/pickle_writer: the few protocol-2 pickle opcodes Stoker writes -- a
// torch.save data.pkl of tensors, a DCP .metadata -- appended to `out`.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace stoker {

class PickleBuilder {
 public:
  std::string out = "\x80\x02";  // PROTO 2
  void global(const std::string& module, const std::string& name) { out += 'c' + module + '\n' + name + '\n'; }
  void text(const std::string& s) { out += 'X'; u32(static_cast<std::uint32_t>(s.size())); out += s; }
  void integer(std::int64_t v) {
    if (v >= INT32_MIN && v <= INT32_MAX) {
      out += 'J';
      u32(static_cast<std::uint32_t>(static_cast<std::int32_t>(v)));
    } else {
      out += '\x8a';
      out += '\x08';
      for (int i = 0; i < 8; ++i) out += static_cast<char>(static_cast<std::uint64_t>(v) >> (8 * i));
    }
  }
  void intTuple(const std::vector<std::int64_t>& v) {
    out += '(';
    for (auto x : v) integer(x);
    out += 't';
  }
  void boolean(bool b) { out += b ? '\x88' : '\x89'; }
  void none() { out += 'N'; }
  void mark() { out += '('; }
  void tuple() { out += 't'; }        // items since the mark
  void reduce() { out += 'R'; }       // callable, args tuple
  void emptyDict() { out += '}'; }
  void setItems() { out += 'u'; }     // key/value pairs since the mark into the dict below it
  void emptyTuple() { out += ')'; }
  void newObject() { out += '\x81'; } // class, args tuple
  void build() { out += 'b'; }        // state into the object below it
  void stop() { out += '.'; }
  void emptyOrderedDict() { global("collections", "OrderedDict"); out += ")R"; }

 private:
  void u32(std::uint32_t v) { for (int i = 0; i < 4; ++i) out += static_cast<char>(v >> (8 * i)); }
};

}  // namespace stoker
