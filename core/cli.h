// core/cli.h — command-line set-up shared by every gtp binary.
//
// absl's --help lists only flags defined in a file named like the program
// ("No flags matched" for `train`, whose flags live in
// recipes/trainer/main.cc): SetUsage makes --help and --helpshort list every
// flag of the binary except abseil's own (--helpfull still shows all).
//
//   int main(int argc, char** argv) {
//     gtp::SetUsage("samples text from a gtp checkpoint; see tools/generate/README.md");
//     absl::ParseCommandLine(argc, argv);
#pragma once

namespace gtp {

// The program's one-line usage message plus the --help filter above.
void SetUsage(const char* usage);

}  // namespace gtp
