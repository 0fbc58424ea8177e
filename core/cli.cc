#include "core/cli.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "absl/strings/string_view.h"

namespace gtp {

void SetUsage(const char* usage) {
  absl::SetProgramUsageMessage(usage);
  absl::FlagsUsageConfig config;
  auto ours = [](absl::string_view file) {
    return !absl::StartsWith(file, "absl/") && !absl::StrContains(file, "/absl/");
  };
  config.contains_help_flags = ours;
  config.contains_helpshort_flags = ours;
  absl::SetFlagsUsageConfig(config);
}

std::vector<char*> ParseCommandLine(int argc, char** argv) {
  const char* prog = argc > 0 ? argv[0] : "gtp";
  if (const char* slash = std::strrchr(prog, '/')) prog = slash + 1;
  for (int i = 1; i < argc; ++i) {
    absl::string_view a = argv[i];
    if (a == "--") break;
    if (a.size() < 2 || a[0] != '-') continue;
    a.remove_prefix(a[1] == '-' ? 2 : 1);
    const size_t eq = a.find('=');
    std::string name(a.substr(0, eq));
    if (absl::StartsWith(name, "help") || name == "version" || name == "only_check_args") continue;
    absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
    bool negated = false;
    if (flag == nullptr && absl::StartsWith(name, "no")) {
      flag = absl::FindCommandLineFlag(name.substr(2));
      negated = flag != nullptr && flag->IsOfType<bool>() && eq == absl::string_view::npos;
      if (!negated) flag = nullptr;
    }
    if (flag == nullptr) {
      std::fprintf(stderr, "%s: unknown flag --%s (--help lists the flags)\n", prog, name.c_str());
      std::exit(2);
    }
    if (negated) continue;
    std::string value;
    if (eq != absl::string_view::npos) {
      value = std::string(a.substr(eq + 1));
    } else if (flag->IsOfType<bool>()) {
      continue;
    } else if (i + 1 < argc) {
      value = argv[++i];  // "--flag value"
    } else {
      std::fprintf(stderr, "%s: flag --%s needs a value\n", prog, name.c_str());
      std::exit(2);
    }
    std::string error;
    if (!flag->ParseFrom(value, &error)) {
      std::fprintf(stderr, "%s: --%s=%s: %s\n", prog, name.c_str(), value.c_str(), error.c_str());
      std::exit(2);
    }
  }
  return absl::ParseCommandLine(argc, argv);
}

}  // namespace gtp
