//===- UcxMailbox.cpp - Mailbox rings over UCX memory and puts ------------===//

#include "transport/UcxMailbox.h"

#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <cstring>

using namespace llvm;

namespace tc {
namespace ucx {

static Error ucxError(const Twine &What, ucs_status_t S) {
  return createStringError(What + ": " + ucs_status_string(S));
}

Expected<Region> Region::allocate(ucp_context_h Ctx, size_t Bytes,
                                  Tally *Count) {
  ucp_mem_map_params_t P{};
  P.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS |
                 UCP_MEM_MAP_PARAM_FIELD_LENGTH | UCP_MEM_MAP_PARAM_FIELD_FLAGS;
  P.address = nullptr;
  P.length = Bytes;
  P.flags = UCP_MEM_MAP_ALLOCATE; // So shared-memory transports can map it.
  Region R;
  R.Ctx = Ctx;
  if (ucs_status_t S = ucp_mem_map(Ctx, &P, &R.Mem); S != UCS_OK)
    return ucxError(formatv("ucp_mem_map of {0} bytes", Bytes), S);
  ucp_mem_attr_t A{};
  A.field_mask = UCP_MEM_ATTR_FIELD_ADDRESS | UCP_MEM_ATTR_FIELD_LENGTH;
  if (ucs_status_t S = ucp_mem_query(R.Mem, &A); S != UCS_OK)
    return ucxError("ucp_mem_query", S);
  R.Base = static_cast<char *>(A.address);
  R.Length = std::max(A.length, Bytes);
  if (Count) {
    R.Count = Count;
    Count->Bytes += R.Length;
    ++Count->Regions;
  }
  std::memset(R.Base, 0, Bytes);
  void *Packed;
  size_t Len;
  if (ucs_status_t S = ucp_rkey_pack(Ctx, R.Mem, &Packed, &Len); S != UCS_OK)
    return ucxError("ucp_rkey_pack", S);
  R.Key.assign(static_cast<const char *>(Packed), Len);
  ucp_rkey_buffer_release(Packed);
  return std::move(R);
}

Region &Region::operator=(Region &&O) {
  if (this != &O) {
    reset();
    Ctx = O.Ctx;
    Mem = O.Mem;
    Base = O.Base;
    Length = O.Length;
    Count = O.Count;
    Key = std::move(O.Key);
    O.Mem = nullptr;
    O.Base = nullptr;
    O.Length = 0;
    O.Count = nullptr;
  }
  return *this;
}

Region::~Region() { reset(); }

void Region::reset() {
  if (Mem)
    ucp_mem_unmap(Ctx, Mem);
  if (Count) {
    Count->Bytes -= Length;
    --Count->Regions;
  }
  Mem = nullptr;
  Base = nullptr;
  Length = 0;
  Count = nullptr;
}

Expected<RemoteKey> RemoteKey::unpackMapped(ucp_ep_h Ep, StringRef Packed,
                                            uint64_t Address) {
  RemoteKey K;
  if (ucs_status_t S = ucp_ep_rkey_unpack(Ep, Packed.data(), &K.Key);
      S != UCS_OK)
    return ucxError("ucp_ep_rkey_unpack", S);
  void *Mapped;
  if (ucs_status_t S = ucp_rkey_ptr(K.Key, Address, &Mapped); S != UCS_OK)
    return ucxError("the peer's memory is not mapped here (ucp_rkey_ptr)", S);
  K.Mapped = static_cast<char *>(Mapped);
  return std::move(K);
}

RemoteKey &RemoteKey::operator=(RemoteKey &&O) {
  if (this != &O) {
    this->~RemoteKey();
    Key = O.Key;
    Mapped = O.Mapped;
    O.Key = nullptr;
    O.Mapped = nullptr;
  }
  return *this;
}

RemoteKey::~RemoteKey() {
  if (Key)
    ucp_rkey_destroy(Key);
  Key = nullptr;
  Mapped = nullptr;
}

Expected<std::unique_ptr<InRing>>
InRing::create(ucp_context_h Ctx, mailbox::Geometry G, Tally *Count) {
  if (Error E = G.check())
    return std::move(E);
  auto R = std::make_unique<InRing>(G);
  Expected<Region> Ring = Region::allocate(Ctx, G.mappedBytes(), Count);
  if (!Ring)
    return Ring.takeError();
  R->Ring = std::move(*Ring);
  return std::move(R);
}

std::string InRing::offer() const {
  mailbox::Offer O;
  O.Shape = Read.shape();
  O.RingAddress = Ring.address();
  O.RemoteKey = Ring.packedKey();
  return mailbox::encodeOffer(O);
}

Expected<std::string> InRing::addArea(ucp_context_h Ctx, Tally *Count) {
  uint32_t Bytes = Read.shape().AreaBytes;
  if (!Bytes)
    return createStringError("this ring offers no large-frame area");
  Expected<Region> A = Region::allocate(Ctx, Bytes, Count);
  if (!A)
    return A.takeError();
  Area = std::move(*A);
  Read.setArea(true);
  mailbox::AreaOffer O;
  O.AreaBytes = Bytes;
  O.Address = Area.address();
  O.RemoteKey = Area.packedKey();
  return mailbox::encodeAreaOffer(O);
}

Error OutRing::attachArea(ucp_ep_h Ep, const mailbox::AreaOffer &O) {
  if (O.AreaBytes != Lane->writer().shape().AreaBytes)
    return createStringError(
        formatv("an area of {0} bytes where the ring's offer said {1}",
                O.AreaBytes, Lane->writer().shape().AreaBytes)
            .str());
  Expected<RemoteKey> Key = RemoteKey::unpackMapped(Ep, O.RemoteKey, O.Address);
  if (!Key)
    return Key.takeError();
  Area = std::move(*Key);
  Lane->attachArea(Area.mapped());
  return Error::success();
}

Expected<std::unique_ptr<OutRing>>
OutRing::accept(ucp_context_h Ctx, ucp_ep_h Ep, const mailbox::Offer &O,
                const uint32_t *AmSent, uint64_t *Sent, Tally *Count) {
  auto R = std::make_unique<OutRing>();
  Expected<RemoteKey> Key = RemoteKey::unpackMapped(Ep, O.RemoteKey,
                                                    O.RingAddress);
  if (!Key)
    return Key.takeError();
  R->Ring = std::move(*Key);
  Expected<Region> Flags = Region::allocate(Ctx, mailbox::FlagsBytes, Count);
  if (!Flags)
    return Flags.takeError();
  R->Flags = std::move(*Flags);
  R->Lane = std::make_shared<mailbox::Lane>(O.Shape, R->Ring.mapped(),
                                            R->Flags.base(), AmSent, Sent);
  return std::move(R);
}

std::string OutRing::acceptRecord() const {
  mailbox::Accept A;
  A.FlagsAddress = Flags.address();
  A.RemoteKey = Flags.packedKey();
  return mailbox::encodeAccept(A);
}

} // namespace ucx
} // namespace tc
