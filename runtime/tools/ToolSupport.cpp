//===- ToolSupport.cpp - Shared bits of tc-serve and tc-send --------------===//

#include "ToolSupport.h"
#include "tc/Version.h"

#include "llvm/Support/WithColor.h"
#include "llvm/Support/raw_ostream.h"

using namespace llvm;

namespace tc {

Expected<std::pair<std::string, uint16_t>> parseHostPort(StringRef S) {
  StringRef Host, Port;
  if (S.starts_with("[")) {
    size_t Close = S.find(']');
    if (Close == StringRef::npos || S.substr(Close + 1).size() < 2 ||
        S[Close + 1] != ':')
      return createStringError("'%s' is not [HOST]:PORT", S.str().c_str());
    Host = S.slice(1, Close);
    Port = S.substr(Close + 2);
  } else {
    std::tie(Host, Port) = S.rsplit(':');
    if (Port.empty() || Host.empty() || !S.contains(':'))
      return createStringError("'%s' is not HOST:PORT", S.str().c_str());
  }
  unsigned P;
  if (Port.getAsInteger(10, P) || P > 65535)
    return createStringError("'%s': bad port '%s'", S.str().c_str(),
                             Port.str().c_str());
  return std::make_pair(Host.str(), uint16_t(P));
}

std::optional<int> standardFlag(StringRef Tool, StringRef Usage,
                                StringRef Arg) {
  if (Arg == "--help" || Arg == "-h") {
    outs() << Usage;
    return 0;
  }
  if (Arg == "--version") {
    outs() << Tool << " (tc) " << TC_VERSION_STRING << "\n";
    return 0;
  }
  return std::nullopt;
}

int toolError(StringRef Tool, const Twine &Msg) {
  WithColor::error(errs(), Tool) << Msg << "\n";
  return 1;
}

bool takeOption(int Argc, char **Argv, int &I, StringRef Opt, std::string &V,
                std::string &Error) {
  StringRef A = Argv[I];
  if (!A.consume_front(Opt))
    return false;
  if (A.consume_front("=")) {
    V = A.str();
    return true;
  }
  if (!A.empty())
    return false;
  if (I + 1 >= Argc) {
    Error = "option '" + Opt.str() + "' needs a value";
    return false;
  }
  V = Argv[++I];
  return true;
}

} // namespace tc
