//===- Transport.cpp - Out-of-line anchors of the transport interface -----===//

#include "transport/Transport.h"

#include "llvm/Support/raw_ostream.h"

namespace tc {

TransportHandler::~TransportHandler() = default;
Transport::~Transport() = default;

char ConnectionError::ID = 0;

void ConnectionError::log(llvm::raw_ostream &OS) const { OS << Msg; }

} // namespace tc
