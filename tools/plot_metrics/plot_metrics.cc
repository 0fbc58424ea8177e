// tools/plot_metrics — renders a run's metrics.jsonl to a PNG: training loss
// (blue) and validation loss (red dots) against the step on top, tokens/s
// (green) below, each panel with a title, axis names, integer step ticks and
// a legend (a small built-in 3×5 font). Axis ranges are printed to stdout.
// No dependencies beyond zlib.
//
//   bazel run //tools/plot_metrics -- gtp_runs/gpt_tiny/metrics.jsonl loss.png
#include <sys/stat.h>
#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "core/user_path.h"

namespace {

constexpr int kW = 900, kH = 640;

struct Image {
  std::vector<uint8_t> px = std::vector<uint8_t>(kW * kH * 3, 255);
  void Set(int x, int y, uint32_t rgb) {
    if (x < 0 || y < 0 || x >= kW || y >= kH) return;
    uint8_t* p = &px[(y * kW + x) * 3];
    p[0] = rgb >> 16, p[1] = (rgb >> 8) & 255, p[2] = rgb & 255;
  }
  void Line(double x0, double y0, double x1, double y1, uint32_t rgb, int thick = 1) {
    const int n = static_cast<int>(std::max(std::abs(x1 - x0), std::abs(y1 - y0))) + 1;
    for (int i = 0; i <= n; ++i) {
      const double t = static_cast<double>(i) / n;
      for (int d = 0; d < thick; ++d) Set(std::lround(x0 + t * (x1 - x0)), std::lround(y0 + t * (y1 - y0)) + d, rgb);
    }
  }
  // A 3×5 font: digits, A–Z (lower case drawn as upper case, but for the
  // 'k' and 'e' of numbers), and . - + / : ( ) _ and space; `scale` pixels
  // per font dot.
  void Text(int x, int y, const std::string& s, uint32_t rgb, int scale = 2) {
    static const char* kDigit[] = {"111101101101111", "010110010010111", "111001111100111",
                                   "111001111001111", "101101111001001", "111100111001111",
                                   "111100111101111", "111001001001001", "111101111101111",
                                   "111101111001111"};
    static const char* kLetter[] = {
        "010101111101101", "110101110101110", "011100100100011", "110101101101110",
        "111100110100111", "111100110100100", "011100101101011", "101101111101101",
        "111010010010111", "001001001101010", "101101110101101", "100100100100111",
        "101111111101101", "110101101101101", "010101101101010", "110101110100100",
        "010101101110011", "110101110101101", "011100010001110", "111010010010010",
        "101101101101111", "101101101101010", "101101111111101", "101101010101101",
        "101101010010010", "111001010100111"};
    for (char c : s) {
      const char* g = c >= '0' && c <= '9' ? kDigit[c - '0']
                      : c == 'e'          ? "000111111100111"
                      : c == 'k'          ? "100101110101101"
                      : c >= 'A' && c <= 'Z' ? kLetter[c - 'A']
                      : c >= 'a' && c <= 'z' ? kLetter[c - 'a']
                      : c == '.'          ? "000000000000010"
                      : c == '-'          ? "000000111000000"
                      : c == '+'          ? "000010111010000"
                      : c == '/'          ? "001001010100100"
                      : c == ':'          ? "000010000010000"
                      : c == '('          ? "010100100100010"
                      : c == ')'          ? "010001001001010"
                      : c == '_'          ? "000000000000111"
                                          : "000000000000000";
      for (int i = 0; i < 15; ++i)
        if (g[i] == '1')
          for (int a = 0; a < scale; ++a)
            for (int b = 0; b < scale; ++b) Set(x + (i % 3) * scale + a, y + (i / 3) * scale + b, rgb);
      x += 4 * scale;
    }
  }
  // The width Text draws `s` with.
  static int TextWidth(const std::string& s, int scale = 2) {
    return static_cast<int>(s.size()) * 4 * scale;
  }
};

void Chunk(std::string& out, const char* type, const std::string& data) {
  uint32_t n = data.size();
  for (int i = 3; i >= 0; --i) out += static_cast<char>((n >> (8 * i)) & 255);
  std::string td = std::string(type, 4) + data;
  out += td;
  uint32_t crc = crc32(0, reinterpret_cast<const Bytef*>(td.data()), td.size());
  for (int i = 3; i >= 0; --i) out += static_cast<char>((crc >> (8 * i)) & 255);
}

bool WritePng(const Image& img, const std::string& path) {
  std::string raw;
  for (int y = 0; y < kH; ++y) {
    raw += '\0';
    raw.append(reinterpret_cast<const char*>(&img.px[y * kW * 3]), kW * 3);
  }
  uLongf zlen = compressBound(raw.size());
  std::string z(zlen, '\0');
  if (compress(reinterpret_cast<Bytef*>(z.data()), &zlen, reinterpret_cast<const Bytef*>(raw.data()), raw.size()) != Z_OK) return false;
  z.resize(zlen);
  std::string png = "\x89PNG\r\n\x1a\n";
  std::string ihdr;
  for (uint32_t v : {uint32_t(kW), uint32_t(kH)})
    for (int i = 3; i >= 0; --i) ihdr += static_cast<char>((v >> (8 * i)) & 255);
  ihdr += std::string("\x08\x02\x00\x00\x00", 5);  // 8-bit RGB
  Chunk(png, "IHDR", ihdr);
  Chunk(png, "IDAT", z);
  Chunk(png, "IEND", "");
  std::ofstream out(path, std::ios::binary);
  out << png;
  return static_cast<bool>(out);
}

// A numeric field of one metrics line: absent, a number (C's nan/inf
// included, as the trainer prints them), or something else.
enum class FieldKind { kAbsent, kNumber, kBad };
FieldKind Field(const std::string& line, const char* key, double* v) {
  const std::string k = std::string("\"") + key + "\": ";
  size_t p = line.find(k);
  if (p == std::string::npos) return FieldKind::kAbsent;
  const char* begin = line.c_str() + p + k.size();
  char* end = nullptr;
  *v = std::strtod(begin, &end);
  if (end == begin || (*end != ',' && *end != '}' && *end != ' ')) return FieldKind::kBad;
  return FieldKind::kNumber;
}

std::string Num(double v) {
  char b[32];
  if (std::abs(v) >= 10000) std::snprintf(b, sizeof b, "%.0fk", v / 1000);
  else if (std::abs(v) >= 100) std::snprintf(b, sizeof b, "%.0f", v);
  else std::snprintf(b, sizeof b, "%.2f", v);
  return b;
}

// A step tick: steps are whole numbers.
std::string StepNum(double v) {
  char b[32];
  if (std::abs(v) >= 100000) std::snprintf(b, sizeof b, "%.0fk", v / 1000);
  else std::snprintf(b, sizeof b, "%.0f", std::round(v));
  return b;
}

struct Series {
  std::vector<double> x, y;
  std::string name;  // the legend's
};

// A panel's words: its title, the y axis's name and a legend entry per series.
struct Labels {
  std::string title, y_axis;
};

// Plots series into the panel [top, top + h) with shared axes.
void Panel(Image& img, int top, int h, const std::vector<std::pair<Series, uint32_t>>& s, bool dots,
           const char* what, const Labels& labels) {
  double x0 = 1e300, x1 = -1e300, y0 = 1e300, y1 = -1e300;
  for (const auto& [ser, c] : s)
    for (size_t i = 0; i < ser.x.size(); ++i) {
      x0 = std::min(x0, ser.x[i]), x1 = std::max(x1, ser.x[i]);
      y0 = std::min(y0, ser.y[i]), y1 = std::max(y1, ser.y[i]);
    }
  if (x0 > x1) return;
  if (x1 == x0) x1 = x0 + 1;
  if (y1 == y0) y1 = y0 + 1;
  const int L = 70, R = kW - 40, T = top + 34, B = top + h - 36;
  // Title (centred), the y axis's name above it, the x axis's below the ticks.
  img.Text((kW - Image::TextWidth(labels.title, 3)) / 2, top + 6, labels.title, 0x000000, 3);
  img.Text(4, T - 24, labels.y_axis, 0x000000);
  img.Text(R - Image::TextWidth("STEP"), B + 22, "STEP", 0x000000);
  img.Line(L, B, R, B, 0x000000);
  img.Line(L, T, L, B, 0x000000);
  double last_step = -1e300;
  for (int i = 0; i <= 4; ++i) {
    const double fy = y0 + (y1 - y0) * i / 4, py = B - (B - T) * i / 4.0;
    img.Line(L - 4, py, R, py, i == 0 ? 0x000000 : 0xdddddd);
    img.Text(4, static_cast<int>(py) - 5, Num(fy), 0x000000);
    // Step ticks at whole steps, each drawn once (a short run has fewer).
    const double fx = std::round(x0 + (x1 - x0) * i / 4);
    if (fx == last_step) continue;
    last_step = fx;
    const double px = L + (fx - x0) / (x1 - x0) * (R - L);
    img.Text(static_cast<int>(px) - 8, B + 8, StepNum(fx), 0x000000);
  }
  // Legend, top right: a line (or a dot) in the series' colour and its name.
  int ly = T + 6;
  for (const auto& [ser, c] : s) {
    if (ser.x.empty() || ser.name.empty()) continue;
    const int lx = R - 20 - Image::TextWidth(ser.name) - 30;
    if (c == 0xd62728) {
      for (int a = -2; a <= 2; ++a) img.Line(lx + 10, ly + 5 + a, lx + 14, ly + 5 + a, c);
    } else {
      img.Line(lx, ly + 4, lx + 24, ly + 4, c, 2);
    }
    img.Text(lx + 30, ly, ser.name, 0x000000);
    ly += 16;
  }
  for (const auto& [ser, c] : s) {
    for (size_t i = 0; i < ser.x.size(); ++i) {
      const double px = L + (ser.x[i] - x0) / (x1 - x0) * (R - L);
      const double py = B - (ser.y[i] - y0) / (y1 - y0) * (B - T);
      if (dots || ser.x.size() == 1 || c == 0xd62728) {
        for (int a = -2; a <= 2; ++a) img.Line(px - 2, py + a, px + 2, py + a, c);
      }
      if (i > 0 && c != 0xd62728) {
        const double qx = L + (ser.x[i - 1] - x0) / (x1 - x0) * (R - L);
        const double qy = B - (ser.y[i - 1] - y0) / (y1 - y0) * (B - T);
        img.Line(qx, qy, px, py, c, 2);
      }
    }
  }
  std::printf("%s: steps %g..%g, values %g..%g\n", what, x0, x1, y0, y1);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: plot_metrics <metrics.jsonl> <out.png>\n");
    return 2;
  }
  // Paths typed by the user mean the directory `bazel run` was called from.
  const std::string metrics = gtp::UserPath(argv[1]), png = gtp::UserPath(argv[2]);
  // (A directory used to read as an empty file: "no loss records in DIR".)
  struct stat st;
  if (stat(metrics.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
    std::fprintf(stderr,
                 "plot_metrics: %s is a directory: give a run's metrics file (%s/metrics.jsonl)\n",
                 metrics.c_str(), metrics.c_str());
    return 1;
  }
  std::ifstream in(metrics);
  if (!in) {
    std::fprintf(stderr, "plot_metrics: cannot read %s\n", metrics.c_str());
    return 1;
  }
  // Every record is {"step": N, ...} with numbers for its values; anything
  // else is refused (non-numbers read as 0 and plotted a made-up curve).
  // Non-finite values (skipped steps) are left out, as plot.py does.
  Series loss, val, tput;
  std::string line;
  int64_t skipped = 0;
  for (int64_t n = 1; std::getline(in, line); ++n) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    // A last line without its newline or '}': a write the run did not finish.
    if (in.eof() && line.back() != '}') break;
    double step = 0;
    if (Field(line, "step", &step) != FieldKind::kNumber || !std::isfinite(step)) {
      std::fprintf(stderr,
                   "plot_metrics: no loss records in %s: line %lld is not a metrics record "
                   "({\"step\": N, \"loss\": X, ...})\n",
                   metrics.c_str(), static_cast<long long>(n));
      return 1;
    }
    for (auto [key, series] : {std::pair<const char*, Series*>{"loss", &loss},
                               {"val_loss", &val},
                               {"tokens_per_s", &tput}}) {
      double v = 0;
      const FieldKind kind = Field(line, key, &v);
      if (kind == FieldKind::kBad) {
        std::fprintf(stderr, "plot_metrics: %s line %lld: \"%s\" is not a number\n",
                     metrics.c_str(), static_cast<long long>(n), key);
        return 1;
      }
      if (kind == FieldKind::kAbsent) continue;
      if (!std::isfinite(v)) {
        skipped += series == &loss;
        continue;
      }
      series->x.push_back(step), series->y.push_back(v);
    }
  }
  if (loss.x.empty()) {
    // (A run whose every loss was NaN plotted axes 1e+300..-1e+300, exit 0.)
    const std::string why = skipped > 0 ? " (all " + std::to_string(skipped) +
                                              " losses are NaN or Inf: nothing to plot)"
                                        : "";
    std::fprintf(stderr, "plot_metrics: no loss records in %s%s\n", metrics.c_str(), why.c_str());
    return 1;
  }
  Image img;
  loss.name = "TRAIN", val.name = "VALIDATION", tput.name = "TOKENS/S";
  Panel(img, 0, 400, {{loss, 0x1f77b4}, {val, 0xd62728}}, false, "loss (blue: train, red: validation)",
        {"LOSS", "LOSS"});
  Panel(img, 400, 240, {{tput, 0x2ca02c}}, false, "tokens/s (green)", {"THROUGHPUT", "TOKENS/S"});
  if (!WritePng(img, png)) {
    std::fprintf(stderr, "plot_metrics: cannot write %s\n", png.c_str());
    return 1;
  }
  std::printf("wrote %s\n", png.c_str());
  return 0;
}
