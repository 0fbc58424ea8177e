// core/cli.h — command-line set-up shared by every gtp binary.
//
// absl's --help lists only flags defined in a file named like the program
// ("No flags matched" for `train`, whose flags live in
// recipes/trainer/main.cc): SetUsage makes --help and --helpshort list every
// flag of the binary except abseil's own (--helpfull still shows all).
//
//   int main(int argc, char** argv) {
//     gtp::SetUsage("samples text from a gtp checkpoint; see tools/generate/README.md");
//     std::vector<char*> args = gtp::ParseCommandLine(argc, argv);
#pragma once

#include <vector>

namespace gtp {

// The program's one-line usage message plus the --help filter above.
void SetUsage(const char* usage);

// absl::ParseCommandLine, but a flag it does not know or a value it cannot
// parse ends the program with exit status 2 (bad usage, as the tools
// document) and one line naming the flag; absl itself exits 1 for those.
// Arguments after "--" are left alone.
std::vector<char*> ParseCommandLine(int argc, char** argv);

}  // namespace gtp
