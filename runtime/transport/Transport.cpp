//===- Transport.cpp - Out-of-line anchors of the transport interface -----===//

#include "transport/Transport.h"

namespace tc {

TransportHandler::~TransportHandler() = default;
Transport::~Transport() = default;

} // namespace tc
