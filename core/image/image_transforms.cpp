#include "image/image_transforms.h"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "util/error.h"

namespace stoker {
namespace {

// A transform as written: Name(arg, key=value, ...); a value is a number, a word or a tuple.
struct Call {
  std::string name;
  std::vector<std::string> positional;
  std::vector<std::pair<std::string, std::string>> keyword;
};

std::string trim(const std::string& s) {
  std::size_t a = 0, b = s.size();
  while (a < b && std::isspace(static_cast<unsigned char>(s[a]))) ++a;
  while (b > a && std::isspace(static_cast<unsigned char>(s[b - 1]))) --b;
  return s.substr(a, b - a);
}

// The knob is the subject (the workbench's form marks it); which transform, then why.
[[noreturn]] void fail(const std::string& what, const std::string& why) { throwBadInput("transforms", what + ": " + why); }

// Splits at commas outside brackets.
std::vector<std::string> splitTop(const std::string& s, const std::string& what) {
  std::vector<std::string> parts;
  int depth = 0;
  std::string cur;
  for (char c : s) {
    if (c == '(' || c == '[') ++depth;
    if (c == ')' || c == ']') {
      if (--depth < 0) fail(what, "unbalanced brackets");
    }
    if (c == ',' && depth == 0) {
      parts.push_back(trim(cur));
      cur.clear();
    } else {
      cur += c;
    }
  }
  if (depth != 0) fail(what, "unbalanced brackets");
  parts.push_back(trim(cur));
  return parts;
}

Call parseCall(const std::string& text) {
  Call c;
  const std::size_t open = text.find('(');
  if (open == std::string::npos || text.back() != ')') fail(text, "expected Name(arguments), e.g. CenterCrop(224)");
  c.name = trim(text.substr(0, open));
  const std::string inner = trim(text.substr(open + 1, text.size() - open - 2));
  if (inner.empty()) return c;
  for (const std::string& arg : splitTop(inner, c.name)) {
    if (arg.empty()) fail(c.name, "an empty argument");
    const std::size_t eq = arg.find('=');
    if (eq != std::string::npos && arg.find('(') > eq)
      c.keyword.emplace_back(trim(arg.substr(0, eq)), trim(arg.substr(eq + 1)));
    else if (!c.keyword.empty())
      fail(c.name, "a positional argument after a keyword one");
    else
      c.positional.push_back(arg);
  }
  return c;
}

double number(const std::string& text, const std::string& what) {
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0' || !std::isfinite(v)) fail(what, "expected a number (got \"" + text + "\")");
  return v;
}

std::vector<double> tuple(const std::string& text, const std::string& what) {
  const bool bracketed = text.size() >= 2 && ((text.front() == '(' && text.back() == ')') || (text.front() == '[' && text.back() == ']'));
  std::vector<double> out;
  if (!bracketed) {
    out.push_back(number(text, what));
    return out;
  }
  for (const std::string& part : splitTop(text.substr(1, text.size() - 2), what))
    if (!part.empty()) out.push_back(number(part, what));
  return out;
}

int pixels(double v, const std::string& what) {
  if (v != std::floor(v) || v < 1 || v > 16384) fail(what, "a size must be a whole number of pixels, 1-16384");
  return static_cast<int>(v);
}

// size: N or (h, w)
void size2(const std::string& text, const std::string& what, int& h, int& w) {
  const auto v = tuple(text, what);
  if (v.size() == 1) {
    h = w = pixels(v[0], what);
  } else if (v.size() == 2) {
    h = pixels(v[0], what);
    w = pixels(v[1], what);
  } else {
    fail(what, "size is N or (height, width)");
  }
}

std::string argument(const Call& c, std::size_t index, const char* key, std::vector<bool>& used) {
  if (index < c.positional.size()) return c.positional[index];
  for (std::size_t k = 0; k < c.keyword.size(); ++k)
    if (c.keyword[k].first == key) {
      used[k] = true;
      return c.keyword[k].second;
    }
  return {};
}

std::string fmt(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.10g", v);
  std::string s = buf;
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  return s;
}

std::string fmt7(float v) {  // a float knob value as written (0.485, not 0.4850000143)
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.7g", static_cast<double>(v));
  return buf;
}

std::string sizeText(int h, int w) { return h == w ? std::to_string(h) : "(" + std::to_string(h) + ", " + std::to_string(w) + ")"; }

}  // namespace

const char* imageDtypeName(ImageDtype d) {
  switch (d) {
    case ImageDtype::U8: return "u8";
    case ImageDtype::F32: return "f32";
    case ImageDtype::F16: return "f16";
    case ImageDtype::BF16: return "bf16";
  }
  return "?";
}

std::vector<std::int64_t> ImageTransforms::sampleShape() const {
  if (dtype == ImageDtype::U8) return {outHeight, outWidth, 3};
  return {3, outHeight, outWidth};
}

std::int64_t ImageTransforms::sampleBytes() const {
  const std::int64_t elem = dtype == ImageDtype::U8 ? 1 : dtype == ImageDtype::F32 ? 4 : 2;
  return std::int64_t(3) * outHeight * outWidth * elem;
}

ImageTransforms parseImageTransforms(const std::string& text) {
  ImageTransforms t;
  const std::string all = trim(text);
  if (all.empty())
    fail("(none)", "image datasets need transforms that fix the output size, e.g. "
                   "\"RandomResizedCrop(224),RandomHorizontalFlip(),Normalize(imagenet)\" or "
                   "\"Resize(256),CenterCrop(224),Normalize(imagenet)\"");
  int stage = 0;  // 1 geometry, 2 flip, 3 dtype/normalize: never backwards
  bool haveDtype = false;
  std::vector<std::string> canonical;
  for (const std::string& part : splitTop(all, "list")) {
    if (part.empty()) fail("list", "an empty transform between commas");
    const Call c = parseCall(part);
    std::vector<bool> used(c.keyword.size(), false);
    auto arg = [&](std::size_t i, const char* key) { return argument(c, i, key, used); };
    auto order = [&](int s, const char* rule) {
      if (s < stage) fail(c.name, std::string("out of order: ") + rule);
      stage = s;
    };
    const char* geometryRule = "geometry (RandomResizedCrop, Resize, CenterCrop) comes first, then RandomHorizontalFlip, then ToDtype/Normalize";
    std::size_t maxPositional = 1;
    if (c.name == "RandomResizedCrop") {
      order(1, geometryRule);
      if (t.randomResizedCrop || t.resizeShorter || t.resizeHeight || t.cropHeight)
        fail(c.name, "RandomResizedCrop is the only geometry transform when used");
      maxPositional = 3;
      const std::string size = arg(0, "size");
      if (size.empty()) fail(c.name, "needs a size, e.g. RandomResizedCrop(224)");
      size2(size, c.name, t.rrcHeight, t.rrcWidth);
      if (const std::string s = arg(1, "scale"); !s.empty()) {
        const auto v = tuple(s, c.name);
        if (v.size() != 2 || !(v[0] > 0) || v[0] > v[1] || v[1] > 1) fail(c.name, "scale is (min, max) with 0 < min <= max <= 1");
        t.scaleMin = v[0];
        t.scaleMax = v[1];
      }
      if (const std::string s = arg(2, "ratio"); !s.empty()) {
        const auto v = tuple(s, c.name);
        if (v.size() != 2 || !(v[0] > 0) || v[0] > v[1] || v[1] > 100) fail(c.name, "ratio is (min, max) with 0 < min <= max");
        t.ratioMin = v[0];
        t.ratioMax = v[1];
      }
      t.randomResizedCrop = true;
      std::string text = "RandomResizedCrop(" + sizeText(t.rrcHeight, t.rrcWidth);
      if (t.scaleMin != 0.08 || t.scaleMax != 1.0) text += ", scale=(" + fmt(t.scaleMin) + ", " + fmt(t.scaleMax) + ")";
      if (t.ratioMin != 3.0 / 4.0 || t.ratioMax != 4.0 / 3.0) text += ", ratio=(" + fmt(t.ratioMin) + ", " + fmt(t.ratioMax) + ")";
      canonical.push_back(text + ")");
    } else if (c.name == "Resize") {
      order(1, geometryRule);
      if (t.randomResizedCrop || t.resizeShorter || t.resizeHeight || t.cropHeight)
        fail(c.name, "one Resize, before CenterCrop, and not with RandomResizedCrop");
      const std::string size = arg(0, "size");
      if (size.empty()) fail(c.name, "needs a size: Resize(256) (the shorter side) or Resize((h, w))");
      const auto v = tuple(size, c.name);
      // torchvision: Resize(256), Resize([256]) and Resize((256,)) all set the shorter side (and
      // "(256)" is Python's int 256); only two numbers give (h, w).
      if (v.size() == 1) {
        t.resizeShorter = pixels(v[0], c.name);
        canonical.push_back("Resize(" + std::to_string(t.resizeShorter) + ")");
      } else {
        size2(size, c.name, t.resizeHeight, t.resizeWidth);
        canonical.push_back("Resize((" + std::to_string(t.resizeHeight) + ", " + std::to_string(t.resizeWidth) + "))");
      }
    } else if (c.name == "CenterCrop") {
      order(1, geometryRule);
      if (t.randomResizedCrop || t.cropHeight) fail(c.name, "one CenterCrop, and not with RandomResizedCrop");
      const std::string size = arg(0, "size");
      if (size.empty()) fail(c.name, "needs a size, e.g. CenterCrop(224)");
      size2(size, c.name, t.cropHeight, t.cropWidth);
      canonical.push_back("CenterCrop(" + sizeText(t.cropHeight, t.cropWidth) + ")");
    } else if (c.name == "RandomHorizontalFlip") {
      order(2, "RandomHorizontalFlip comes after the geometry and before ToDtype/Normalize");
      if (t.hasFlip) fail(c.name, "given twice");
      const std::string p = arg(0, "p");
      t.flipP = p.empty() ? 0.5 : number(p, c.name);
      if (t.flipP < 0 || t.flipP > 1) fail(c.name, "p must be 0-1");
      t.hasFlip = true;
      canonical.push_back("RandomHorizontalFlip(" + fmt(t.flipP) + ")");
    } else if (c.name == "ToDtype") {
      order(3, "ToDtype comes last (with Normalize)");
      if (haveDtype) fail(c.name, "given twice");
      const std::string d = arg(0, "dtype");
      if (d == "u8" || d == "uint8") t.dtype = ImageDtype::U8;
      else if (d == "f32" || d == "float32") t.dtype = ImageDtype::F32;
      else if (d == "f16" || d == "float16") t.dtype = ImageDtype::F16;
      else if (d == "bf16" || d == "bfloat16") t.dtype = ImageDtype::BF16;
      else fail(c.name, "dtype is u8 (HWC, 0-255), f32, f16 or bf16 (CHW, [0, 1] then Normalize) (got \"" + d + "\")");
      haveDtype = true;
    } else if (c.name == "Normalize") {
      order(3, "Normalize comes last (with ToDtype)");
      if (t.normalize) fail(c.name, "given twice");
      maxPositional = 2;
      const std::string mean = arg(0, "mean"), sd = arg(1, "std");
      if (mean == "imagenet" && sd.empty()) {
        t.mean = {0.485f, 0.456f, 0.406f};
        t.std = {0.229f, 0.224f, 0.225f};
        t.imagenet = true;
        canonical.push_back("Normalize(imagenet)");
      } else {
        const auto m = tuple(mean, c.name), s = tuple(sd, c.name);
        if (m.size() != 3 || s.size() != 3) fail(c.name, "Normalize(imagenet) or Normalize(mean=(r, g, b), std=(r, g, b))");
        for (int i = 0; i < 3; ++i) {
          if (!(s[static_cast<std::size_t>(i)] > 0)) fail(c.name, "std must be positive");
          t.mean[static_cast<std::size_t>(i)] = static_cast<float>(m[static_cast<std::size_t>(i)]);
          t.std[static_cast<std::size_t>(i)] = static_cast<float>(s[static_cast<std::size_t>(i)]);
          // Checked as the float it becomes (as torchvision does): std 1e-50 is 0 in float32 and
          // made every value +-inf; a mean of 1e50 is inf.
          if (!(t.std[static_cast<std::size_t>(i)] > 0) || !std::isfinite(t.std[static_cast<std::size_t>(i)]))
            fail(c.name, "std must be positive and finite as a float32");
          if (!std::isfinite(t.mean[static_cast<std::size_t>(i)])) fail(c.name, "mean must be finite as a float32");
        }
        canonical.push_back("Normalize(mean=(" + fmt(m[0]) + ", " + fmt(m[1]) + ", " + fmt(m[2]) + "), std=(" + fmt(s[0]) + ", " +
                            fmt(s[1]) + ", " + fmt(s[2]) + "))");
      }
      t.normalize = true;
    } else {
      fail(c.name.empty() ? part : c.name,
           "unknown transform (known: RandomResizedCrop, Resize, CenterCrop, RandomHorizontalFlip, ToDtype, Normalize)");
    }
    if (c.positional.size() > maxPositional) fail(c.name, "too many arguments");
    for (std::size_t k = 0; k < c.keyword.size(); ++k)
      if (!used[k]) fail(c.name, "unknown argument \"" + c.keyword[k].first + "\"");
  }
  if (t.normalize && t.dtype == ImageDtype::U8) fail("Normalize", "needs a float output: drop ToDtype(u8) or pick f32/f16/bf16");
  if (haveDtype) canonical.push_back(std::string("ToDtype(") + imageDtypeName(t.dtype) + ")");

  if (t.randomResizedCrop) {
    t.outHeight = t.rrcHeight;
    t.outWidth = t.rrcWidth;
  } else if (t.cropHeight) {
    t.outHeight = t.cropHeight;
    t.outWidth = t.cropWidth;
  } else if (t.resizeHeight) {
    t.outHeight = t.resizeHeight;
    t.outWidth = t.resizeWidth;
  } else {
    fail(t.resizeShorter ? "Resize" : "list",
         "the output size must be fixed (a batch is one tensor): add CenterCrop(N) after Resize(N), use Resize((h, w)), "
         "or RandomResizedCrop(N)");
  }
  for (std::size_t i = 0; i < canonical.size(); ++i) t.text += (i ? "," : "") + canonical[i];
  return t;
}

std::string ImageTransforms::torchvisionCompose() const {
  std::vector<std::string> steps;
  auto size = [](int h, int w) { return h == w ? std::to_string(h) : "(" + std::to_string(h) + ", " + std::to_string(w) + ")"; };
  if (randomResizedCrop) {
    std::string s = "transforms.RandomResizedCrop(" + size(rrcHeight, rrcWidth);
    if (scaleMin != 0.08 || scaleMax != 1.0) s += ", scale=(" + fmt(scaleMin) + ", " + fmt(scaleMax) + ")";
    if (ratioMin != 3.0 / 4.0 || ratioMax != 4.0 / 3.0) s += ", ratio=(" + fmt(ratioMin) + ", " + fmt(ratioMax) + ")";
    steps.push_back(s + ")");
  }
  if (resizeShorter) steps.push_back("transforms.Resize(" + std::to_string(resizeShorter) + ")");
  if (resizeHeight)
    steps.push_back("transforms.Resize((" + std::to_string(resizeHeight) + ", " + std::to_string(resizeWidth) + "))");
  if (cropHeight) steps.push_back("transforms.CenterCrop(" + size(cropHeight, cropWidth) + ")");
  if (hasFlip) steps.push_back("transforms.RandomHorizontalFlip(" + fmt(flipP) + ")");
  if (dtype == ImageDtype::U8) {
    steps.push_back("transforms.PILToTensor()");
    // HWC uint8, as Stoker's u8 (default_collate's stack makes it contiguous). A partial of
    // torch.permute, not a lambda: spawn and forkserver workers (Python 3.14's default) pickle it.
    steps.push_back("transforms.Lambda(functools.partial(torch.permute, dims=(1, 2, 0)))");
  } else {
    steps.push_back("transforms.ToTensor()");
    if (normalize)
      steps.push_back("transforms.Normalize(mean=(" + fmt7(mean[0]) + ", " + fmt7(mean[1]) + ", " + fmt7(mean[2]) + "), std=(" +
                      fmt7(std[0]) + ", " + fmt7(std[1]) + ", " + fmt7(std[2]) + "))");
    if (dtype == ImageDtype::F16) steps.push_back("transforms.ConvertImageDtype(torch.float16)");
    if (dtype == ImageDtype::BF16) steps.push_back("transforms.ConvertImageDtype(torch.bfloat16)");
  }
  std::string out = "transforms.Compose([\n";
  for (const auto& s : steps) out += "    " + s + ",\n";
  return out + "])";
}

}  // namespace stoker
