#include "io/pickle_reader.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <unordered_map>

#include "util/error.h"

namespace stoker {
namespace {

using Kind = PyValue::Kind;

const std::map<std::string, Dtype>& storageClasses() {
  static const std::map<std::string, Dtype> k = {
      {"FloatStorage", Dtype::F32},   {"DoubleStorage", Dtype::F64}, {"HalfStorage", Dtype::F16},
      {"BFloat16Storage", Dtype::BF16}, {"LongStorage", Dtype::I64}, {"IntStorage", Dtype::I32},
      {"ShortStorage", Dtype::I16},   {"CharStorage", Dtype::I8},    {"ByteStorage", Dtype::U8},
      {"BoolStorage", Dtype::BOOL},   {"ComplexFloatStorage", Dtype::C64},
      // torch >= 2.3 names storages of the dtypes 1.13 lacks; their bytes are read like safetensors'.
      {"UInt16Storage", Dtype::U16},  {"UInt32Storage", Dtype::U32},  {"UInt64Storage", Dtype::U64},
      {"Float8_e5m2Storage", Dtype::F8_E5M2}, {"Float8_e4m3fnStorage", Dtype::F8_E4M3},
      {"Float8_e8m0fnuStorage", Dtype::F8_E8M0},
  };
  return k;
}

const std::map<std::string, Dtype>& torchDtypes() {
  static const std::map<std::string, Dtype> k = {
      {"float32", Dtype::F32}, {"float64", Dtype::F64}, {"float16", Dtype::F16}, {"bfloat16", Dtype::BF16},
      {"int64", Dtype::I64},   {"int32", Dtype::I32},   {"int16", Dtype::I16},   {"int8", Dtype::I8},
      {"uint8", Dtype::U8},    {"bool", Dtype::BOOL},   {"complex64", Dtype::C64},
      {"uint16", Dtype::U16},  {"uint32", Dtype::U32},  {"uint64", Dtype::U64},
      {"float8_e5m2", Dtype::F8_E5M2}, {"float8_e4m3fn", Dtype::F8_E4M3}, {"float8_e8m0fnu", Dtype::F8_E8M0},
  };
  return k;
}

// DCP's metadata classes and the modules torch 1.13 and 2.x keep them in (matched by name and
// module; anything else is refused).
bool isDcpClass(const std::string& module, const std::string& name) {
  static const char* kMetadataModules[] = {
      "torch.distributed._shard.checkpoint.metadata", "torch.distributed.checkpoint.metadata"};
  static const char* kMetadataNames[] = {"Metadata", "TensorStorageMetadata", "ChunkStorageMetadata",
                                         "BytesStorageMetadata", "MetadataIndex", "StorageMeta",
                                         "TensorProperties"};
  static const char* kFilesystemModules[] = {
      "torch.distributed._shard.checkpoint.filesystem", "torch.distributed.checkpoint.filesystem"};
  for (const char* m : kMetadataModules)
    for (const char* n : kMetadataNames)
      if (module == m && name == n) return true;
  for (const char* m : kFilesystemModules)
    if (module == m && name == "_StorageInfo") return true;
  return module == "torch.distributed._shard.sharded_tensor.metadata" && name == "TensorProperties";
}

bool isMemoryFormatEnum(const std::string& full) {
  return full == "torch.distributed._shard.sharded_tensor.metadata.MEM_FORMAT_ENCODING" ||
         full == "torch.distributed.checkpoint.metadata._MEM_FORMAT_ENCODING";
}

PyRef make(Kind k) {
  auto v = std::make_shared<PyValue>();
  v->kind = k;
  return v;
}

// What a state dict never needs, refused so that walking the result stays cheap: nesting deeper
// than this, or more values than this once shared ones are counted at every place they appear
// (a 1 KB pickle of x = [x, x] forty times over expands to 2^40; found while fixing the cycle
// leak below, it hung `stoker ckpt inspect`).
constexpr int kMaxDepth = 1000;
constexpr std::uint64_t kMaxExpanded = 1u << 22;
constexpr std::uint64_t kMaxCopiedBytes = 64u << 20;  // strings copied while building values

class Unpickler {
  // checkShape's record of one value of the result.
  struct Seen { bool done = false; int height = 0; std::uint64_t expanded = 0; };

 public:
  Unpickler(const std::uint8_t* data, std::size_t n, const std::string& subject, PickleProfile profile)
      : p_(data), n_(n), subject_(subject), profile_(profile) {}
  Unpickler(const Unpickler&) = delete;
  Unpickler& operator=(const Unpickler&) = delete;
  // Containers the result does not reach are taken apart too: a pickle may build a cycle, drop it
  // from the stack and STOP with another value (found by fuzz_dcp_metadata as a leak).
  ~Unpickler() { takeApart(accepted_ ? &shape_ : nullptr); }

  PyRef run() {
    while (true) {
      std::uint8_t op = u8();
      switch (op) {
        case 0x80: u8(); break;                      // PROTO
        case 0x95: bytes(8); break;                  // FRAME
        case '.':                                    // STOP
          if (stack_.size() != 1 || !marks_.empty()) fail("stack not balanced at STOP");
          checkShape(stack_.back());
          accepted_ = true;
          return stack_.back();
        case '(': marks_.push_back(stack_.size()); break;
        case ')': push(container(Kind::Tuple)); break;
        case 't': push(sequence(Kind::Tuple, popMark())); break;
        case 0x85: case 0x86: case 0x87: {           // TUPLE1..3
          std::size_t k = op - 0x84u;
          need(k);
          std::vector<PyRef> items(stack_.end() - static_cast<std::ptrdiff_t>(k), stack_.end());
          stack_.resize(stack_.size() - k);
          push(sequence(Kind::Tuple, std::move(items)));
          break;
        }
        case ']': push(container(Kind::List)); break;
        case 'l': push(sequence(Kind::List, popMark())); break;
        case 'a': { auto v = pop(); listTop()->items.push_back(v); break; }
        case 'e': { auto items = popMark(); auto l = listTop(); l->items.insert(l->items.end(), items.begin(), items.end()); break; }
        case '}': push(container(Kind::Dict)); break;
        case 'd': { auto items = popMark(); auto d = container(Kind::Dict); setItems(d, items); push(d); break; }
        case 's': { auto v = pop(); auto k = pop(); setItems(dictTop(), {k, v}); break; }
        case 'u': { auto items = popMark(); setItems(dictTop(), items); break; }
        case 'N': push(make(Kind::None)); break;
        case 0x88: case 0x89: { auto v = make(Kind::Bool); v->boolean = op == 0x88; push(v); break; }
        case 'J': { std::int32_t x; std::memcpy(&x, bytes(4), 4); pushInt(x); break; }
        case 'K': pushInt(u8()); break;
        case 'M': { auto b = bytes(2); pushInt(b[0] | (b[1] << 8)); break; }
        case 0x8a: pushInt(longLE(u8())); break;     // LONG1
        case 0x8b: pushInt(longLE(u32())); break;    // LONG4
        case 'G': {                                  // BINFLOAT, big-endian
          auto b = bytes(8);
          std::uint64_t bits = 0;
          for (int i = 0; i < 8; ++i) bits = (bits << 8) | b[i];
          auto v = make(Kind::Float);
          std::memcpy(&v->real, &bits, 8);
          push(v);
          break;
        }
        case 'X': pushText(Kind::String, u32()); break;
        case 0x8c: pushText(Kind::String, u8()); break;
        case 0x8d: pushText(Kind::String, u64()); break;
        case 'B': pushText(Kind::Bytes, u32()); break;
        case 'C': pushText(Kind::Bytes, u8()); break;
        case 0x8e: pushText(Kind::Bytes, u64()); break;
        case 'q': memo(u8()); break;
        case 'r': memo(u32()); break;
        case 0x94: memo(memo_.size()); break;        // MEMOIZE
        case 'h': push(recall(u8())); break;
        case 'j': push(recall(u32())); break;
        case 'c': {                                  // GLOBAL "module\nname\n"
          std::string module = line(), name = line();
          push(global(module, name));
          break;
        }
        case 0x93: {                                 // STACK_GLOBAL
          auto name = pop(), module = pop();
          if (module->kind != Kind::String || name->kind != Kind::String) fail("STACK_GLOBAL needs strings");
          push(global(module->text, name->text));
          break;
        }
        case 'R': { auto args = pop(); auto fn = pop(); push(reduce(fn, args)); break; }
        case 0x81: { auto args = pop(); auto cls = pop(); push(newObject(cls, args)); break; }
        case 'b': { auto state = pop(); need(1); build(stack_.back(), state); break; }
        case 'Q': { auto pid = pop(); push(persistent(pid)); break; }
        default: {
          char hex[8];
          std::snprintf(hex, sizeof hex, "0x%02x", op);
          fail(std::string("pickle opcode ") + hex + " is not supported in a state dict");
        }
      }
    }
  }

 private:
  [[noreturn]] void fail(const std::string& why) {
    throwBadInput(subject_, (profile_ == PickleProfile::StateDict ? "data.pkl: " : "") + why);
  }
  bool dcp() const { return profile_ == PickleProfile::DcpMetadata; }

  // Opcodes that copy a container's items (BUILD, torch.Size, OrderedDict) can copy one memoised
  // container again and again for a few bytes each; their copies share checkShape's budget, counted
  // as they happen (a 100 KB pickle asked for gigabytes before STOP; found in review).
  void charge(std::size_t items) {
    copied_ += items;
    if (copied_ > kMaxExpanded) fail("copies more than " + std::to_string(kMaxExpanded) + " items while building values");
  }
  // The same for the bytes of strings copied out of memoised values (a path joined from a memoised
  // part 1000 times, fed back in, reached a TB from a 7 KB .metadata; found in review).
  const std::string& chargeText(const std::string& text) {
    copiedBytes_ += text.size();
    if (copiedBytes_ > kMaxCopiedBytes)
      fail("copies more than " + std::to_string(kMaxCopiedBytes) + " bytes of strings while building values");
    return text;
  }

  // NEWOBJ: only DCP's dataclasses, with no arguments (dataclasses pickle their fields as state).
  PyRef newObject(const PyRef& cls, const PyRef& args) {
    if (!dcp()) fail("NEWOBJ creates arbitrary objects; not allowed in a state dict");
    if (cls->kind != Kind::Global || !isDcpClass(cls->text.substr(0, cls->text.rfind('.')),
                                                 cls->text.substr(cls->text.rfind('.') + 1)))
      fail("NEWOBJ of " + (cls->kind == Kind::Global ? cls->text : std::string("a non-class")) +
           ", which is not one of DCP's metadata classes");
    if (args->kind != Kind::Tuple || !args->items.empty()) fail("NEWOBJ of " + cls->text + " with arguments");
    auto v = container(Kind::Object);
    v->text = cls->text;
    return v;
  }
  // BUILD: a DCP object's state (its __dict__, or TensorProperties' 5-tuple) is kept; other
  // state (OrderedDict._metadata in a state dict) is not needed.
  void build(const PyRef& target, const PyRef& state) {
    if (target->kind != Kind::Object) return;
    if (!target->dict.empty() || !target->items.empty()) fail("BUILD of " + target->text + " twice");
    charge(state->dict.size() + state->items.size());
    if (state->kind == Kind::Dict) target->dict = state->dict;
    else if (state->kind == Kind::Tuple) target->items = state->items;
    else if (state->kind != Kind::None) fail("BUILD of " + target->text + " with a state that is neither a dict nor a tuple");
  }

  const std::uint8_t* bytes(std::size_t k) {
    if (k > n_ - pos_) fail("truncated pickle");
    const std::uint8_t* b = p_ + pos_;
    pos_ += k;
    return b;
  }
  std::uint8_t u8() { return *bytes(1); }
  std::uint32_t u32() { auto b = bytes(4); return b[0] | (b[1] << 8) | (b[2] << 16) | (std::uint32_t(b[3]) << 24); }
  std::uint64_t u64() {
    auto b = bytes(8);
    std::uint64_t v = 0;
    for (int i = 7; i >= 0; --i) v = (v << 8) | b[i];
    return v;
  }
  std::int64_t longLE(std::size_t k) {
    if (k > 8) fail("integer wider than 64 bits");
    auto b = bytes(k);
    if (k == 0) return 0;
    std::uint64_t v = 0;
    for (std::size_t i = k; i-- > 0;) v = (v << 8) | b[i];
    if (k < 8 && (b[k - 1] & 0x80)) v |= ~0ull << (8 * k);  // sign-extend
    return static_cast<std::int64_t>(v);
  }
  std::string line() {
    std::size_t start = pos_;
    while (pos_ < n_ && p_[pos_] != '\n') ++pos_;
    if (pos_ >= n_) fail("truncated GLOBAL");
    return std::string(reinterpret_cast<const char*>(p_ + start), pos_++ - start);
  }

  void push(PyRef v) {
    if (stack_.size() > (1u << 24)) fail("pickle stack too deep");
    stack_.push_back(std::move(v));
  }
  void pushInt(std::int64_t x) { auto v = make(Kind::Int); v->integer = x; push(v); }
  void pushText(Kind k, std::uint64_t len) {
    if (len > n_ - pos_) fail("truncated string");
    auto v = make(k);
    auto b = bytes(static_cast<std::size_t>(len));
    v->text.assign(reinterpret_cast<const char*>(b), static_cast<std::size_t>(len));
    push(v);
  }
  void need(std::size_t k) {
    std::size_t floor = marks_.empty() ? 0 : marks_.back();
    if (stack_.size() < floor + k) fail("stack underflow");
  }
  PyRef pop() { need(1); auto v = stack_.back(); stack_.pop_back(); return v; }
  std::vector<PyRef> popMark() {
    if (marks_.empty()) fail("no MARK on the stack");
    std::size_t m = marks_.back();
    marks_.pop_back();
    std::vector<PyRef> items(stack_.begin() + static_cast<std::ptrdiff_t>(m), stack_.end());
    stack_.resize(m);
    return items;
  }
  PyRef sequence(Kind k, std::vector<PyRef> items) { auto v = container(k); v->items = std::move(items); return v; }
  PyRef container(Kind k) {
    auto v = make(k);
    containers_.push_back(v);
    return v;
  }

  // Pickle may build a value that contains itself (APPEND or SETITEM of a memoised list or dict
  // into itself), which shared_ptr never frees (found by fuzz_unpickle as a leak), and it may
  // share one value at many places. Walks the result once, without recursion, and refuses a
  // cycle, nesting deeper than kMaxDepth and more than kMaxExpanded values counted per place.
  void checkShape(const PyRef& root) {
    struct Frame { const PyValue* v; std::size_t next = 0; int height = 0; std::uint64_t expanded = 1; };
    auto child = [](const PyValue& v, std::size_t i) -> const PyValue* {
      if (i < v.items.size()) return v.items[i].get();
      i -= v.items.size();
      if (i / 2 < v.dict.size()) return (i % 2 ? v.dict[i / 2].second : v.dict[i / 2].first).get();
      return nullptr;
    };
    auto& seen = shape_;
    std::vector<Frame> path{{root.get()}};
    seen[root.get()];
    while (!path.empty()) {
      const PyValue* next = child(*path.back().v, path.back().next++);
      if (next) {
        auto [it, fresh] = seen.try_emplace(next);
        if (fresh) {
          if (path.size() > static_cast<std::size_t>(kMaxDepth))
            fail("values nest deeper than " + std::to_string(kMaxDepth) + " levels");
          path.push_back({next});
          continue;
        }
        if (!it->second.done) fail("a value contains itself (a cycle), which a state dict never does");
        Frame& f = path.back();
        f.height = std::max(f.height, it->second.height + 1);
        f.expanded = std::min(kMaxExpanded + 1, f.expanded + it->second.expanded);
        continue;
      }
      const Frame f = path.back();
      path.pop_back();
      if (f.height > kMaxDepth) fail("values nest deeper than " + std::to_string(kMaxDepth) + " levels");
      if (f.expanded > kMaxExpanded)
        fail("shared values repeat to more than " + std::to_string(kMaxExpanded) + " entries when expanded");
      seen[f.v] = {true, f.height, f.expanded};
      if (!path.empty()) {
        path.back().height = std::max(path.back().height, f.height + 1);
        path.back().expanded = std::min(kMaxExpanded + 1, path.back().expanded + f.expanded);
      }
    }
  }

  // A refused pickle's values are freed one by one: every container is emptied while this holds
  // a reference to each, so cycles come apart and a deep chain is not freed by deep recursion.
  // With `keep` (an accepted pickle's result, as checkShape walked it) only the others are.
  void takeApart(const std::unordered_map<const PyValue*, Seen>* keep) {
    std::vector<PyRef> alive;
    alive.reserve(containers_.size());
    for (auto& w : containers_)
      if (auto v = w.lock(); v && !(keep && keep->count(v.get()))) alive.push_back(std::move(v));
    for (auto& v : alive) {
      v->items.clear();
      v->dict.clear();
    }
  }
  PyRef listTop() { need(1); if (stack_.back()->kind != Kind::List) fail("APPEND to a non-list"); return stack_.back(); }
  PyRef dictTop() { need(1); if (stack_.back()->kind != Kind::Dict) fail("SETITEM on a non-dict"); return stack_.back(); }
  void setItems(const PyRef& d, const std::vector<PyRef>& kv) {
    if (kv.size() % 2) fail("odd number of items for a dict");
    for (std::size_t i = 0; i < kv.size(); i += 2) d->dict.emplace_back(kv[i], kv[i + 1]);
  }
  void memo(std::size_t index) {
    need(1);
    // Picklers number memo slots from 0, one per memoised object, and every object costs at
    // least a byte: an index beyond the pickle's size is hostile (a LONG_BINPUT of 2^26 used to
    // allocate 1 GiB of slots; found by fuzz_unpickle).
    if (index > n_) fail("memo index " + std::to_string(index) + " is beyond the pickle's " + std::to_string(n_) + " bytes");
    if (memo_.size() <= index) memo_.resize(index + 1);
    memo_[index] = stack_.back();
  }
  PyRef recall(std::size_t index) {
    if (index >= memo_.size() || !memo_[index]) fail("memo slot " + std::to_string(index) + " is empty");
    return memo_[index];
  }

  PyRef global(const std::string& module, const std::string& name) {
    static const char* kAllowed[] = {
        "collections.OrderedDict", "torch._utils._rebuild_tensor_v2",
        "torch._utils._rebuild_parameter", "torch._utils._rebuild_parameter_with_state",
    };
    static const char* kDcpAllowed[] = {
        "torch.Size", "torch.serialization._get_layout", "builtins.getattr",
        "pathlib.PosixPath", "pathlib.PurePosixPath", "pathlib.Path",
    };
    std::string full = module + "." + name;
    bool ok = module == "torch" && storageClasses().count(name);
    for (const char* a : kAllowed) ok = ok || full == a;
    if (dcp()) {
      for (const char* a : kDcpAllowed) ok = ok || full == a;
      // Any torch.<lowercase name> (dtypes Stoker lacks too, so the reader can name the tensor
      // whose dtype it cannot read): a global is inert data here, REDUCE refuses to call it.
      const bool torchName = module == "torch" && !name.empty() &&
                             name.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789_") == std::string::npos;
      ok = ok || torchName || isDcpClass(module, name) || isMemoryFormatEnum(full);
    }
    if (!ok)
      fail(dcp() ? "refuses " + full + " (a DCP .metadata holds only DCP's metadata classes, torch.Size and dtypes)"
                 : "refuses to call " + full +
                       " (only state dicts of tensors are read, as torch.load(weights_only=True) does)");
    auto v = make(Kind::Global);
    v->text = full;
    return v;
  }

  std::int64_t intArg(const PyRef& v, const char* what) {
    if (v->kind != Kind::Int) fail(std::string(what) + " is not an integer");
    return v->integer;
  }
  std::vector<std::int64_t> intTuple(const PyRef& v, const char* what) {
    if (v->kind != Kind::Tuple && v->kind != Kind::List) fail(std::string(what) + " is not a tuple");
    std::vector<std::int64_t> out;
    for (auto& x : v->items) out.push_back(intArg(x, what));
    return out;
  }

  PyRef persistent(const PyRef& pid) {
    // ('storage', torch.<Type>Storage, key, location, numel)
    if (pid->kind != Kind::Tuple || pid->items.size() < 5 || pid->items[0]->kind != Kind::String ||
        pid->items[0]->text != "storage" || pid->items[1]->kind != Kind::Global)
      fail("unsupported persistent id (expected a torch storage)");
    auto cls = pid->items[1]->text.substr(pid->items[1]->text.rfind('.') + 1);
    auto v = make(Kind::Storage);
    // Any allowed global may sit where the storage class belongs (found by fuzz_unpickle: an
    // OrderedDict there escaped as std::out_of_range instead of a refusal).
    const auto known = storageClasses().find(cls);
    if (known == storageClasses().end()) fail("persistent id names " + pid->items[1]->text + ", not a storage class");
    v->tensor.dtype = known->second;
    if (pid->items[2]->kind != Kind::String || pid->items[3]->kind != Kind::String)
      fail("storage key or location is not a string");
    v->tensor.storageKey = chargeText(pid->items[2]->text);
    v->tensor.location = chargeText(pid->items[3]->text);
    v->tensor.storageNumel = intArg(pid->items[4], "storage size");
    if (v->tensor.storageNumel < 0) fail("negative storage size");
    // Its size in bytes must fit in 63 bits: every reader multiplies (a wrapped product let a
    // 4-byte record pass for a 2^62-element storage; found in review).
    const std::int64_t elem = std::max<std::int64_t>(1, dtypeBits(v->tensor.dtype) / 8);
    if (v->tensor.storageNumel > INT64_MAX / elem) fail("storage size " + std::to_string(v->tensor.storageNumel) + " overflows");
    return v;
  }

  PyRef reduce(const PyRef& fn, const PyRef& args) {
    if (fn->kind != Kind::Global) fail("REDUCE of a non-callable");
    if (args->kind != Kind::Tuple) fail("REDUCE arguments are not a tuple");
    const auto& a = args->items;
    const std::string& f = fn->text;
    if (f == "collections.OrderedDict") {
      auto d = container(Kind::Dict);
      if (!a.empty() && a[0]->kind == Kind::List) charge(a[0]->items.size());
      if (!a.empty() && a[0]->kind == Kind::List)
        for (auto& pair : a[0]->items)
          if (pair->kind == Kind::Tuple && pair->items.size() == 2)
            d->dict.emplace_back(pair->items[0], pair->items[1]);
      return d;
    }
    if (f == "torch._utils._rebuild_tensor_v2") {
      if (a.size() < 4 || a[0]->kind != Kind::Storage) fail("_rebuild_tensor_v2 needs (storage, offset, size, stride, ...)");
      auto t = make(Kind::Tensor);
      chargeText(a[0]->tensor.storageKey);
      chargeText(a[0]->tensor.location);
      t->tensor = a[0]->tensor;
      t->tensor.offset = intArg(a[1], "storage offset");
      t->tensor.size = intTuple(a[2], "tensor size");
      t->tensor.stride = intTuple(a[3], "tensor stride");
      checkBounds(t->tensor);
      return t;
    }
    if (dcp()) {
      if (f == "torch.Size") {  // torch.Size((3, 4)): a tuple of ints
        if (a.size() != 1) fail("torch.Size needs one tuple");
        intTuple(a[0], "torch.Size");
        charge(a[0]->items.size());
        return sequence(Kind::Tuple, a[0]->items);
      }
      if (f == "torch.serialization._get_layout" || f == "builtins.getattr" || isMemoryFormatEnum(f) ||
          f.rfind("pathlib.", 0) == 0)
        return dcpName(f, a);
    }
    if (f.rfind("torch._utils._rebuild_parameter", 0) != 0) fail("REDUCE of " + f + " is not supported");
    // _rebuild_parameter(data, requires_grad, hooks[, state]): the data is the tensor
    if (a.empty() || a[0]->kind != Kind::Tensor) fail(f + " needs a tensor");
    return a[0];
  }

  // What DCP's metadata only names: a layout ("torch.strided"), a memory-format enum member
  // (getattr(ENUM, "TORCH_CONTIGUOUS_FORMAT") from Python >= 3.11, ENUM(0) before), a path.
  PyRef dcpName(const std::string& f, const std::vector<PyRef>& a) {
    auto v = make(Kind::String);
    if (f == "builtins.getattr") {
      if (a.size() != 2 || a[0]->kind != Kind::Global || !isMemoryFormatEnum(a[0]->text) || a[1]->kind != Kind::String)
        fail("getattr is allowed only on DCP's memory-format enum");
      v->text = chargeText(a[1]->text);
    } else if (isMemoryFormatEnum(f)) {
      if (a.size() != 1 || a[0]->kind != Kind::Int) fail(f + " needs an integer");
      v->text = std::to_string(a[0]->integer);
    } else if (f == "torch.serialization._get_layout") {
      if (a.size() != 1 || a[0]->kind != Kind::String) fail("_get_layout needs a name");
      v->text = chargeText(a[0]->text);
    } else {  // pathlib: the parts joined
      for (const auto& part : a) {
        if (part->kind != Kind::String) fail(f + " needs strings");
        if (!v->text.empty() && v->text.back() != '/') v->text += '/';
        v->text += chargeText(part->text);
      }
    }
    return v;
  }

  void checkBounds(const PyTensorRef& t) {
    if (t.size.size() != t.stride.size()) fail("tensor size and stride differ in length");
    if (t.offset < 0) fail("negative storage offset");
    // Its bytes as a dense tensor must be countable, and a size some machine holds (1 PiB): a zero
    // stride lets a 4-byte storage claim 2^59 floats, whose byte count wrapped to 4 and sized the
    // buffer a strided load then overran.
    constexpr std::uint64_t kMaxTensorBytes = std::uint64_t{1} << 50;
    std::uint64_t elements = 1;
    for (std::int64_t s : t.size)
      if (s < 0 || __builtin_mul_overflow(elements, static_cast<std::uint64_t>(s), &elements)) fail("tensor size overflows");
    if (const auto bytes = dtypeBytesFor(t.dtype, elements); !bytes || *bytes > kMaxTensorBytes)
      fail("tensor of " + std::to_string(elements) + " elements is too large to load");
    std::int64_t last = t.offset;
    for (std::size_t i = 0; i < t.size.size(); ++i) {
      if (t.size[i] < 0 || t.stride[i] < 0) fail("negative size or stride");
      if (t.size[i] == 0) return;  // empty tensor touches no storage
      std::int64_t span = 0;
      if (__builtin_mul_overflow(t.size[i] - 1, t.stride[i], &span) || __builtin_add_overflow(last, span, &last))
        fail("tensor extent overflows");
    }
    if (last >= t.storageNumel)
      fail("tensor reaches element " + std::to_string(last) + " of a storage of " +
           std::to_string(t.storageNumel));
  }

  const std::uint8_t* p_;
  std::size_t n_;
  std::size_t pos_ = 0;
  std::string subject_;
  std::vector<PyRef> stack_;
  std::vector<std::size_t> marks_;
  std::vector<PyRef> memo_;
  std::vector<std::weak_ptr<PyValue>> containers_;  // every tuple, list and dict made, for takeApart
  std::unordered_map<const PyValue*, Seen> shape_;    // the result's values, as checkShape walked them
  bool accepted_ = false;
  PickleProfile profile_;
  std::uint64_t copied_ = 0;
  std::uint64_t copiedBytes_ = 0;
};

}  // namespace

PyRef unpickle(const std::uint8_t* data, std::size_t n, const std::string& subject, PickleProfile profile) {
  return Unpickler(data, n, subject, profile).run();
}

std::optional<Dtype> dtypeFromTorchName(const std::string& name) {
  const std::string bare = name.rfind("torch.", 0) == 0 ? name.substr(6) : name;
  auto it = torchDtypes().find(bare);
  if (it == torchDtypes().end()) return std::nullopt;
  return it->second;
}

std::string torchStorageClass(Dtype d, bool torch2) {
  for (const auto& [name, dtype] : storageClasses()) {
    const bool only2 = name.rfind("UInt", 0) == 0 || name.rfind("Float8", 0) == 0;
    if (dtype == d && (torch2 || !only2)) return name;
  }
  return {};
}

}  // namespace stoker
