//===- RuntimeSend.cpp - The source side ----------------------------------===//
//
// The source side of the protocol engine: registering ifuncs (the source
// member loaded here, the archive shipped to targets), creating messages,
// and the send paths: code ids per connection, the small frames of the
// steady state (mailbox lane, laid out for the transport, or through it),
// frames with code, fences, region reads and local invokes, held until the
// peer's Hello.
//
//===----------------------------------------------------------------------===//

#include "protocol/Runtime.h"
#include "protocol/RuntimeImpl.h"
#include "transport/Bytes.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

#include <algorithm>

using namespace llvm;

namespace tc {

//===----------------------------------------------------------------------===//
// Source side
//===----------------------------------------------------------------------===//

SourceCode::~SourceCode() {
  if (std::shared_ptr<JitEngine> J = Jit.lock())
    consumeError(J->unload(Hash, Role::Source));
}

/// Targets get the archive without source members (listed by digest only,
/// so the hash, the code's identity on the wire, is the archive's own).
static Expected<std::string> shippedArchive(const Archive &A) {
  Archive Shipped = thinArchive(
      A, [](const Member &M) { return M.TheRole == Role::Target; });
  if (Shipped.Members.empty())
    return createStringError("ifunc '%s': archive has no target members",
                             A.Name.c_str());
  Expected<SmallString<0>> Out = writeArchive(Shipped);
  if (!Out)
    return Out.takeError();
  return Out->str().str();
}

Expected<std::shared_ptr<const Ifunc>>
Runtime::registerArchive(StringRef Bytes) {
  Expected<Archive> A = readArchive(MemoryBufferRef(Bytes, "archive"));
  if (!A)
    return A.takeError();
  auto F = std::make_shared<Ifunc>();
  F->Name = A->Name;
  Expected<const LoadedIfunc &> Src = Jit->load(*A, LoadMode::Auto,
                                                Role::Source);
  if (!Src)
    return createStringError("ifunc '%s': cannot load its source side: %s",
                             A->Name.c_str(),
                             toString(Src.takeError()).c_str());
  F->Source = &*Src;
  std::weak_ptr<SourceCode> &Slot = SourceCodes[A->Hash];
  F->SourceHold = Slot.lock();
  if (!F->SourceHold) {
    F->SourceHold = std::make_shared<SourceCode>();
    F->SourceHold->Jit = Jit;
    F->SourceHold->Hash = A->Hash;
    Slot = F->SourceHold;
  }

  Expected<std::string> Out = shippedArchive(*A);
  if (!Out)
    return Out.takeError();
  F->Bytes = std::move(*Out);
  F->Hash = A->Hash;
  F->Parsed = std::move(*A);
  Registered[F->Name] = F;
  event("registered " + F->Name + " " + toHex(F->Hash).substr(0, 16));
  return std::shared_ptr<const Ifunc>(F);
}

Expected<std::shared_ptr<const Ifunc>>
Runtime::registerByName(StringRef Name, StringRef SearchPath) {
  SmallVector<StringRef, 4> Dirs;
  SearchPath.split(Dirs, ':', -1, /*KeepEmpty=*/false);
  for (StringRef D : Dirs) {
    SmallString<256> P(D);
    sys::path::append(P, Name + ".tcfb");
    ErrorOr<std::unique_ptr<MemoryBuffer>> B = MemoryBuffer::getFile(P);
    if (!B)
      continue;
    Expected<std::shared_ptr<const Ifunc>> F =
        registerArchive((*B)->getBuffer());
    if (!F)
      return createStringError("'%s': %s", P.c_str(),
                               toString(F.takeError()).c_str());
    if ((*F)->Name != Name)
      return createStringError("'%s' holds ifunc '%s', not '%s'", P.c_str(),
                               (*F)->Name.c_str(), Name.str().c_str());
    return F;
  }
  return createStringError("no %s.tcfb in the ifunc search path '%s'",
                           Name.str().c_str(), SearchPath.str().c_str());
}

void Runtime::deregister(const std::shared_ptr<const Ifunc> &F) {
  auto It = Registered.find(F->Name);
  if (It != Registered.end() && It->second == F)
    Registered.erase(It);
}

std::shared_ptr<const Ifunc> Runtime::lookup(StringRef Name) const {
  auto It = Registered.find(Name.str());
  return It == Registered.end() ? nullptr : It->second;
}

Expected<Message> Runtime::createMessage(std::shared_ptr<const Ifunc> F,
                                         const void *SourceArgs,
                                         size_t SourceArgsSize) {
  void *Args = const_cast<void *>(SourceArgs);
  size_t Bound = callJitted(F->Source->Bound, Args, SourceArgsSize);
  Message M;
  M.Code = std::move(F);
  M.Payload = std::make_shared<std::string>(Bound, '\0');
  size_t Size = Bound;
  int RC = callJitted(M.Code->Source->Init, Args, SourceArgsSize,
                      M.Payload->data(), &Size);
  if (RC != 0)
    return createStringError("ifunc '%s': %s_payload_init returned %d",
                             M.Code->Name.c_str(), M.Code->Name.c_str(), RC);
  if (Size > Bound)
    return createStringError("ifunc '%s': %s_payload_init wrote %zu bytes, "
                             "more than the bound of %zu",
                             M.Code->Name.c_str(), M.Code->Name.c_str(), Size,
                             Bound);
  M.Payload->resize(Size);
  return std::move(M);
}

std::string &writableMessagePayload(Message &M) {
  if (M.Payload.use_count() > 1)
    M.Payload = std::make_shared<std::string>(*M.Payload);
  return *M.Payload;
}

StringRef Runtime::shippedBytes(const Ifunc &F, const Conn &S) {
  if (!S.Peer || Opts.ShipAllMembers)
    return F.Bytes;
  // The member the peer runs: its GPU's, if it has one and the archive a
  // member for it, else its CPU's (docs/wire-format.md, "Hello").
  Expected<const Member *> Pick = selectMemberFor(F.Parsed, *S.Peer);
  if (!Pick) {
    // Nothing for this peer: ship every target member, so the target
    // itself says what it lacks (Error NoMember).
    consumeError(Pick.takeError());
    return F.Bytes;
  }
  // The newest archive format both read (a peer from before format 3 did
  // not say, and reads 2); with none in common it gets the file as it is
  // and says what it cannot read.
  unsigned Version = std::min<unsigned>(S.Peer->ArchiveMax, ArchiveVersion);
  if (Version < std::max<unsigned>(S.Peer->ArchiveMin, OldestArchiveVersion))
    return F.Bytes;
  auto [It, New] = ShippedFor.try_emplace(std::make_tuple(
      F.Hash, memberDigest(**Pick), S.Peer->Dictionaries, Version));
  if (New) {
    Archive Thin =
        thinArchive(F.Parsed, [&](const Member &M) { return &M == *Pick; });
    // A member compressed with a dictionary the peer lacks goes as plain
    // zstd: same hash, a few hundred bytes more.
    withoutDictionaries(Thin, S.Peer->Dictionaries, Compression::Zstd);
    Expected<SmallString<0>> Out = writeArchive(Thin, Version);
    if (!Out) { // Cannot happen: it was read from a valid archive.
      consumeError(Out.takeError());
      ShippedFor.erase(It);
      return F.Bytes;
    }
    It->second = Out->str().str();
  }
  return It->second;
}

template <typename DoneFn, typename ResendFn>
void Runtime::holdOrFail(Conn &S, DoneFn Done, ResendFn Resend, bool Message) {
  auto Shared = std::make_shared<DoneFn>(std::move(Done));
  Held H{[Shared, Resend = std::move(Resend)]() mutable {
           Resend(std::move(*Shared));
         },
         [Shared](Error E) {
           if (*Shared)
             (*Shared)(std::move(E));
           else
             consumeError(std::move(E));
         },
         Message};
  if (S.AwaitingHello) {
    S.Unsent += Message;
    S.Outbox.push_back(std::move(H));
  } else {
    S.Unsent += Message; // Failed before it left.
    H.Fail(createStringError(S.Failure));
  }
}

void Runtime::sendFrame(ConnId C, const Frame &F, StringRef Body,
                        unique_function<void(Error)> &&Done) {
  // The transport copies what it must keep past send(): the header lives
  // on the stack, and the runtime allocates nothing per frame. The room in
  // front is the transport's (Transport::sendWithRoom).
  char Buf[Transport::HeaderRoom + FrameCodeHeaderSize];
  char *Header = Buf + Transport::HeaderRoom;
  size_t Size = encodeFrameHeader(F, Header);
  ++Counters.FramesSent;
  Counters.BytesSent += Size + Body.size();
  T->sendWithRoom(C, StringRef(Header, Size), Body, std::move(Done));
}

/// Writes the header of \p I (compact when the peer reads compact frames,
/// else the full 24 bytes) and returns its size.
static LLVM_ATTRIBUTE_ALWAYS_INLINE size_t encodeInvokeHeader(
    bool Compact, const SmallInvoke &I, size_t PayloadSize, char *Header) {
  static_assert(CompactHeaderMax <= FrameHeaderSize, "room for both");
  if (LLVM_LIKELY(Compact))
    return encodeCompactInvoke(I, PayloadSize, Header);
  encodeSmallInvoke(I, PayloadSize, Header);
  return FrameHeaderSize;
}

void Runtime::lookUpConn(ConnId C) {
  auto [It, New] = Conns.try_emplace(C);
  if (New)
    It->second.Lane = T->lane(C);
  LastConn = &It->second;
  LastConnId = C;
}

void Runtime::adoptLanes() {
  LaneGen = T->laneGeneration();
  for (auto &[C, S] : Conns)
    if (!S.Lane)
      S.Lane = T->lane(C);
}

bool Runtime::laneSend(ConnId C, Conn &S, const SmallInvoke &I,
                       StringRef Payload) {
  if (!S.Lane || !S.Compact || !S.Lane->isOpen())
    return false;
  size_t Size = compactInvokeSize(I, Payload.size());
  mailbox::Lane::Wrote W = S.Lane->write(Size, Payload, [&](char *Out) {
    return encodeCompactInvoke(I, Payload.size(), Out);
  });
  if (LLVM_UNLIKELY(W != mailbox::Lane::Wrote::Yes)) {
    if (W != mailbox::Lane::Wrote::Doorbell)
      return false; // Full, or not for this frame: the transport decides.
    T->laneDoorbell(C);
  }
  ++Counters.FramesSent;
  ++Counters.LaneFrames;
  Counters.BytesSent += Size + Payload.size();
  return true;
}

void Runtime::sendSmall(ConnId C, Conn &S, const SmallInvoke &I,
                        StringRef Payload,
                        unique_function<void(Error)> &&Done,
                        const std::shared_ptr<std::string> *Owner) {
  // Steady state over a mailbox: the frame is encoded straight into the
  // peer's ring, without a call into the transport.
  if (!Done && laneSend(C, S, I, Payload))
    return;
  sendByTransport(C, S, I, Payload, std::move(Done), Owner);
}

void Runtime::sendByTransport(ConnId C, Conn &S, const SmallInvoke &I,
                              StringRef Payload,
                              unique_function<void(Error)> &&Done,
                              const std::shared_ptr<std::string> *Owner) {
  // Steady state of the active-message path: no completion to keep and a
  // small payload, laid out once, as the transport sends it.
  if (!Done && Payload.size() <= FrameNowPayloadMax &&
      FrameHeaderSize + Payload.size() <= T->sendNowMax())
    return sendLaidOut(C, S, I, Payload);
  char Buf[Transport::HeaderRoom + FrameHeaderSize];
  char *Header = Buf + Transport::HeaderRoom;
  size_t Size = encodeInvokeHeader(S.Compact, I, Payload.size(), Header);
  ++Counters.FramesSent;
  Counters.BytesSent += Size + Payload.size();
  // Steady state: no completion to keep, and the transport sends at once.
  if (!Done && Size + Payload.size() <= T->sendNowMax() &&
      T->trySendNow(C, StringRef(Header, Size), Payload))
    return;
  if (Owner && Payload.size() > Transport::ShareMin)
    return T->sendShared(C, StringRef(Header, Size), Payload, *Owner,
                         std::move(Done));
  T->sendWithRoom(C, StringRef(Header, Size), Payload, std::move(Done));
}

void Runtime::sendLaidOut(ConnId C, Conn &S, const SmallInvoke &I,
                          StringRef Payload) {
  alignas(8) char Buf[Transport::FrameRoom + Transport::FrameNowMax];
  char *Frame = Buf + Transport::FrameRoom;
  size_t Size = encodeInvokeHeader(S.Compact, I, Payload.size(), Frame);
  copyBytes(Frame + Size, Payload.data(), Payload.size());
  ++Counters.FramesSent;
  Counters.BytesSent += Size + Payload.size();
  if (T->trySendFrameNow(C, Frame, Size, Size + Payload.size()))
    return;
  T->sendWithRoom(C, StringRef(Frame, Size),
                  StringRef(Frame + Size, Payload.size()),
                  unique_function<void(Error)>());
}

void Runtime::send(ConnId C, const Message &M) {
  Conn &S = conn(C);
  ++S.Sent;
  if (LLVM_LIKELY(!S.Blocked && S.LastSent == M.Code &&
                  !Opts.AlwaysShipCode))
    return sendSmall(
        C, S, SmallInvoke{FrameType::Invoke, S.NextSeq++, S.LastSentId},
        *M.Payload, unique_function<void(Error)>(), &M.Payload);
  sendMessage(C, S, M, unique_function<void(Error)>());
}

void Runtime::send(ConnId C, const Message &M,
                   unique_function<void(Error)> Done) {
  Conn &S = conn(C);
  ++S.Sent;
  sendMessage(C, S, M, std::move(Done));
}

void Runtime::sendMessage(ConnId C, Conn &S, const Message &M,
                          unique_function<void(Error)> Done) {
  if (LLVM_UNLIKELY(S.Blocked))
    return holdOrFail(S, std::move(Done),
                      [this, C, M](unique_function<void(Error)> D) {
                        sendMessage(C, conn(C), M, std::move(D));
                      },
                      /*Message=*/true);
  // The code id of this identity here; the last ifunc sent is remembered,
  // so a run of one ifunc's messages skips the lookup.
  bool Sent = true;
  if (S.LastSent != M.Code) {
    auto [It, New] = S.SentCode.try_emplace(M.Code->Hash, S.NextCodeId);
    if (New) {
      Sent = false;
      S.ById[S.NextCodeId++] = M.Code;
    }
    S.LastSent = M.Code;
    S.LastSentId = It->second;
  }
  if (Sent && !Opts.AlwaysShipCode) {
    sendSmall(C, S, SmallInvoke{FrameType::Invoke, S.NextSeq++, S.LastSentId},
              *M.Payload, std::move(Done), &M.Payload);
    return;
  }
  Frame F;
  F.Type = FrameType::Invoke;
  F.Seq = S.NextSeq++;
  F.CodeId = S.LastSentId;
  F.Payload = *M.Payload;
  F.Flags = FrameHasCode;
  F.Hash = M.Code->Hash;
  F.Archive = shippedBytes(*M.Code, S);
  BodyBuf.assign(*M.Payload);
  BodyBuf += F.Archive;
  sendFrame(C, F, BodyBuf, std::move(Done));
}

/// A frame that could not be sent: the transport failed the connection
/// (UCX's status in the message). A connection's error, as those of a
/// connection that closed are (Runtime.h, fence()).
static Error sendFailed(Error E) {
  if (E.isA<ConnectionError>())
    return E;
  return connectionError(toString(std::move(E)));
}

void Runtime::fence(ConnId C, unique_function<void(Error)> Done) {
  sendFence(C, conn(C).Sent, std::move(Done));
}

void Runtime::sendFence(ConnId C, uint64_t Covers,
                        unique_function<void(Error)> Done) {
  Conn &S = conn(C);
  if (S.Blocked)
    return holdOrFail(S, std::move(Done),
                      [this, C, Covers](unique_function<void(Error)> D) {
                        sendFence(C, Covers, std::move(D));
                      });
  Frame F;
  F.Type = FrameType::Fence;
  F.Seq = S.NextSeq++;
  S.Fences[F.Seq] = std::move(Done);
  S.Covers[F.Seq] = Covers;
  sendFrame(C, F, StringRef(), [this, C, Seq = F.Seq](Error E) {
    if (E)
      E = sendFailed(std::move(E));
    auto It = Conns.find(C);
    if (E && (It == Conns.end() ||
              !finishWaiter(It->second.Fences, Seq, std::move(E))))
      consumeError(std::move(E));
  });
}

void Runtime::readRegion(ConnId C, uint64_t Length,
                         unique_function<void(Expected<std::string>)> Done) {
  sendRead(C, conn(C).Sent, Length, std::move(Done));
}

void Runtime::sendRead(ConnId C, uint64_t Covers, uint64_t Length,
                       unique_function<void(Expected<std::string>)> Done) {
  Conn &S = conn(C);
  if (S.Blocked)
    return holdOrFail(S, std::move(Done),
                      [this, C, Covers, Length](
                          unique_function<void(Expected<std::string>)> D) {
                        sendRead(C, Covers, Length, std::move(D));
                      });
  Frame F;
  F.Type = FrameType::RegionRead;
  F.Seq = S.NextSeq++;
  F.Length = Length;
  S.Reads[F.Seq] = std::move(Done);
  S.Covers[F.Seq] = Covers;
  S.Asked[F.Seq] = Length;
  sendFrame(C, F, StringRef(), [this, C, Seq = F.Seq](Error E) {
    if (E)
      E = sendFailed(std::move(E));
    auto It = Conns.find(C);
    if (E && (It == Conns.end() ||
              !finishWaiter(It->second.Reads, Seq, std::move(E))))
      consumeError(std::move(E));
  });
}

void Runtime::acknowledge(Conn &S, uint32_t Seq) {
  auto It = S.Covers.find(Seq);
  if (It == S.Covers.end())
    return;
  S.Acknowledged = std::max(S.Acknowledged, It->second);
  // Answers come in order: those before it are answered, or never will be.
  S.Covers.erase(S.Covers.begin(), std::next(It));
}

std::string describeLoss(const Delivery &D, uint64_t Total) {
  if (Total == 0)
    return "";
  uint64_t Acked = std::min(D.Acknowledged, Total), Lost = Total - Acked;
  // Those never handed to send() (a stream that stopped) or that never
  // left this process did not run either.
  uint64_t Unsent =
      std::min(Lost, D.Unsent + (Total - std::min(D.Sent, Total)));
  std::string S =
      formatv(": {0} of {1} messages were not acknowledged", Lost, Total);
  if (Lost == 0)
    return S;
  SmallVector<std::string, 3> Parts;
  if (Acked)
    Parts.push_back(formatv("the first {0} ran", Acked));
  if (Lost > Unsent)
    Parts.push_back(formatv("{0} may have run or not", Lost - Unsent));
  if (Unsent)
    Parts.push_back(formatv("{0} {1} never sent", Unsent,
                            Unsent == 1 ? "was" : "were"));
  return S + " (" + join(Parts, "; ") + ")";
}

Delivery Runtime::delivery(ConnId C) const {
  auto It = Conns.find(C);
  if (It == Conns.end())
    return Delivery();
  const Conn &S = It->second;
  return Delivery{S.Sent, S.Acknowledged, S.Unsent,
                  S.Fences.size() + S.Reads.size() + S.Outbox.size()};
}

void Runtime::sendLocal(ConnId C, StringRef Name, StringRef Payload,
                        unique_function<void(Error)> Done) {
  sendLocal(C, localFunctionId(Name), Payload, std::move(Done));
}

void Runtime::sendLocal(ConnId C, uint32_t Id, StringRef Payload,
                        unique_function<void(Error)> Done) {
  Conn &S = conn(C);
  ++S.Sent;
  sendLocalMessage(C, S, Id, Payload, std::move(Done));
}

void Runtime::sendLocalMessage(ConnId C, Conn &S, uint32_t Id,
                               StringRef Payload,
                               unique_function<void(Error)> Done) {
  if (LLVM_UNLIKELY(S.Blocked))
    return holdOrFail(S, std::move(Done),
                      [this, C, Id, Payload = Payload.str()](
                          unique_function<void(Error)> D) {
                        sendLocalMessage(C, conn(C), Id, Payload,
                                         std::move(D));
                      },
                      /*Message=*/true);
  sendSmall(C, S, SmallInvoke{FrameType::LocalInvoke, S.NextSeq++, Id},
            Payload, std::move(Done));
}

} // namespace tc
