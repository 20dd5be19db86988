//===- ToolSupport.h - Shared bits of tc-serve and tc-send ------*- C++ -*-===//
#ifndef TC_RUNTIME_TOOLS_TOOLSUPPORT_H
#define TC_RUNTIME_TOOLS_TOOLSUPPORT_H

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <optional>
#include <string>
#include <utility>

namespace tc {

/// Splits HOST:PORT (HOST may be [v6]); the port must be 0..65535.
llvm::Expected<std::pair<std::string, uint16_t>>
parseHostPort(llvm::StringRef S);

/// Handles --help/-h (prints \p Usage) and --version; returns the exit
/// status when \p Arg was one of them.
std::optional<int> standardFlag(llvm::StringRef Tool, llvm::StringRef Usage,
                                llvm::StringRef Arg);

/// Prints `TOOL: error: MSG` once and returns 1.
int toolError(llvm::StringRef Tool, const llvm::Twine &Msg);

/// Reads `--opt=V` or `--opt V` from argv at index I (advancing I).
/// Returns true and sets V when argv[I] is Opt.
bool takeOption(int Argc, char **Argv, int &I, llvm::StringRef Opt,
                std::string &V, std::string &Error);

} // namespace tc

#endif
