//===- KindTable.cpp - Cut a member's metadata kind table -----------------===//
//
// The metadata kind block of a module's bitcode names every kind the
// writer's LLVMContext knows; records that refer to a kind (attachments to
// instructions, functions and globals) do so by its id. The reader parses
// every entry of the block, 2,300 instructions each for LLVM 22's 49 fixed
// kinds, 0.15 M instructions of a TSI load's 1.05 M (callgrind).
// cutMetadataKinds rewrites that one block in place:
//
//   before: [ENTER kind block][49 x METADATA_KIND][END]
//   after:  [ENTER kind block][used METADATA_KIND records]
//             [ENTER pad block][one record of zero operands][END]
//           [END]
//
// The new block is exactly as long as the old one, so the offsets the file
// holds (the module's VST offset, function block offsets) stay right, and
// the reader skips the pad block with one jump (parseMetadataKinds skips
// sub-blocks). Everything outside the block is copied bit for bit.
//
//===----------------------------------------------------------------------===//

#include "KindTable.h"

#include "llvm/Bitcode/LLVMBitCodes.h"
#include "llvm/Bitstream/BitstreamReader.h"
#include "llvm/IR/InstIterator.h"
#include "llvm/IR/Module.h"
#include "llvm/Support/Error.h"

#include <optional>
#include <vector>

using namespace llvm;

namespace tc {

DenseSet<unsigned> usedMetadataKinds(const Module &M) {
  DenseSet<unsigned> Used;
  SmallVector<std::pair<unsigned, MDNode *>, 8> MDs;
  auto Take = [&] {
    for (const auto &KV : MDs)
      Used.insert(KV.first);
    MDs.clear();
  };
  for (const GlobalObject &GO : M.global_objects()) {
    GO.getAllMetadata(MDs);
    Take();
  }
  for (const Function &F : M)
    for (const Instruction &I : instructions(F)) {
      I.getAllMetadata(MDs);
      Take();
    }
  return Used;
}

namespace {

/// The pad block's id: not one LLVM defines (the reader skips any sub-block
/// of the kind block), below 128 so that it takes one VBR8 chunk.
constexpr unsigned PadBlockId = 120;
/// The pad block's abbreviation width: the four fixed abbreviation ids.
constexpr unsigned PadCodeWidth = 2;

/// Where the metadata kind block lies, and what it holds.
struct KindBlock {
  uint64_t Start = 0; ///< Bit of its ENTER_SUBBLOCK abbreviation id.
  uint64_t End = 0;   ///< Bit after its END_BLOCK (a multiple of 32).
  unsigned OuterWidth = 0; ///< The module block's abbreviation id width.
  unsigned Width = 0;      ///< Its own.
  /// Each METADATA_KIND record's operands: the id, then the name's bytes.
  std::vector<SmallVector<uint64_t, 24>> Kinds;
};

Error malformed(const char *What) {
  return createStringError(std::errc::illegal_byte_sequence, What);
}

Expected<KindBlock> findKindBlock(StringRef Bitcode) {
  BitstreamCursor C(arrayRefFromStringRef(Bitcode));
  Expected<SimpleBitstreamCursor::word_t> Magic = C.Read(32);
  if (!Magic)
    return Magic.takeError();
  if (*Magic != 0xdec04342) // 'B' 'C' 0xC0 0xDE
    return malformed("not raw bitcode");
  std::optional<BitstreamBlockInfo> Info;
  auto ReadInfo = [&]() -> Error {
    Expected<std::optional<BitstreamBlockInfo>> BI = C.ReadBlockInfoBlock();
    if (!BI)
      return BI.takeError();
    if (!*BI)
      return malformed("bad BLOCKINFO block");
    Info = std::move(**BI);
    C.setBlockInfo(&*Info);
    return Error::success();
  };
  // To the module block.
  for (;;) {
    Expected<BitstreamEntry> E = C.advance();
    if (!E)
      return E.takeError();
    if (E->Kind != BitstreamEntry::SubBlock)
      return malformed("no module block");
    if (E->ID == bitc::MODULE_BLOCK_ID)
      break;
    if (Error Err = E->ID == bitc::BLOCKINFO_BLOCK_ID ? ReadInfo()
                                                      : C.SkipBlock())
      return std::move(Err);
  }
  if (Error Err = C.EnterSubBlock(bitc::MODULE_BLOCK_ID))
    return std::move(Err);
  // To its metadata kind block.
  for (;;) {
    uint64_t Start = C.GetCurrentBitNo();
    unsigned OuterWidth = C.getAbbrevIDWidth();
    Expected<BitstreamEntry> E =
        C.advance(BitstreamCursor::AF_DontAutoprocessAbbrevs);
    if (!E)
      return E.takeError();
    if (E->Kind == BitstreamEntry::Record) {
      if (E->ID == bitc::DEFINE_ABBREV) {
        if (Error Err = C.ReadAbbrevRecord())
          return std::move(Err);
      } else if (Expected<unsigned> R = C.skipRecord(E->ID); !R) {
        return R.takeError();
      }
      continue;
    }
    if (E->Kind != BitstreamEntry::SubBlock)
      return malformed("no metadata kind block");
    if (E->ID == bitc::BLOCKINFO_BLOCK_ID) {
      if (Error Err = ReadInfo())
        return std::move(Err);
      continue;
    }
    if (E->ID != bitc::METADATA_KIND_BLOCK_ID) {
      if (Error Err = C.SkipBlock())
        return std::move(Err);
      continue;
    }
    KindBlock K;
    K.Start = Start;
    K.OuterWidth = OuterWidth;
    if (Error Err = C.EnterSubBlock(bitc::METADATA_KIND_BLOCK_ID))
      return std::move(Err);
    K.Width = C.getAbbrevIDWidth();
    SmallVector<uint64_t, 64> Vals;
    for (;;) {
      // Sub-blocks (a pad block cutMetadataKinds left) are skipped, as the
      // reader does.
      Expected<BitstreamEntry> R = C.advanceSkippingSubblocks();
      if (!R)
        return R.takeError();
      if (R->Kind == BitstreamEntry::EndBlock) {
        K.End = C.GetCurrentBitNo();
        return std::move(K);
      }
      if (R->Kind != BitstreamEntry::Record)
        return malformed("metadata kind block holds more than kinds");
      Vals.clear();
      Expected<unsigned> Code = C.readRecord(R->ID, Vals);
      if (!Code)
        return Code.takeError();
      if (*Code != bitc::METADATA_KIND || Vals.empty())
        return malformed("metadata kind block holds more than kinds");
      K.Kinds.emplace_back(Vals.begin(), Vals.end());
    }
  }
}

/// Writes a bitstream: bits fill each byte from its least significant end,
/// as LLVM's BitstreamWriter does.
class BitWriter {
public:
  /// Starts with the first \p Bits bits of \p From.
  BitWriter(StringRef From, uint64_t Bits)
      : Bytes(From.substr(0, Bits / 8)), Pos(Bits / 8 * 8) {
    if (Bits % 8)
      emit(uint8_t(From[Bits / 8]) & ((1u << (Bits % 8)) - 1), Bits % 8);
  }
  void emit(uint64_t V, unsigned N) {
    for (unsigned I = 0; I < N; ++I, ++Pos) {
      if (Pos % 8 == 0)
        Bytes.push_back(0);
      if ((V >> I) & 1)
        Bytes.back() = char(uint8_t(Bytes.back()) | (1u << (Pos % 8)));
    }
  }
  void emitVBR(uint64_t V, unsigned N) {
    const uint64_t High = uint64_t(1) << (N - 1);
    for (; V >= High; V >>= N - 1)
      emit((V & (High - 1)) | High, N);
    emit(V, N);
  }
  void align32() { emit(0, (32 - Pos % 32) % 32); }
  /// Writes \p V over the 32 bits at \p At (a multiple of 32).
  void patch32(uint64_t At, uint32_t V) {
    for (unsigned I = 0; I < 4; ++I)
      Bytes[At / 8 + I] = char(V >> (8 * I));
  }
  /// ENTER_SUBBLOCK \p Id with abbreviation ids of \p Width bits, in a block
  /// whose own are \p OuterWidth bits; returns the bit of its length word.
  uint64_t enterBlock(unsigned OuterWidth, unsigned Id, unsigned Width) {
    emit(bitc::ENTER_SUBBLOCK, OuterWidth);
    emitVBR(Id, bitc::BlockIDWidth);
    emitVBR(Width, bitc::CodeLenWidth);
    align32();
    uint64_t LengthAt = Pos;
    emit(0, bitc::BlockSizeWidth);
    return LengthAt;
  }
  /// END_BLOCK, then the block's length in words after \p LengthAt.
  void endBlock(unsigned Width, uint64_t LengthAt) {
    emit(bitc::END_BLOCK, Width);
    align32();
    patch32(LengthAt, uint32_t((Pos - LengthAt) / 32 - 1));
  }

  std::string Bytes;
  uint64_t Pos; ///< Bits written.
};

/// Bits a VBR6 field takes for \p V.
unsigned vbr6Bits(uint64_t V) {
  unsigned Chunks = 1;
  for (; V >= 32; V >>= 5)
    ++Chunks;
  return 6 * Chunks;
}

} // namespace

std::string cutMetadataKinds(StringRef Bitcode,
                             const DenseSet<unsigned> &Used) {
  Expected<KindBlock> K = findKindBlock(Bitcode);
  if (!K) {
    consumeError(K.takeError());
    return Bitcode.str();
  }
  std::vector<const SmallVector<uint64_t, 24> *> Keep;
  for (const SmallVector<uint64_t, 24> &R : K->Kinds)
    if (Used.count(unsigned(R[0])))
      Keep.push_back(&R);
  if (Keep.size() == K->Kinds.size())
    return Bitcode.str();

  BitWriter W(Bitcode, K->Start);
  uint64_t KindLength =
      W.enterBlock(K->OuterWidth, bitc::METADATA_KIND_BLOCK_ID, K->Width);
  for (const SmallVector<uint64_t, 24> *R : Keep) {
    W.emit(bitc::UNABBREV_RECORD, K->Width);
    W.emitVBR(bitc::METADATA_KIND, 6);
    W.emitVBR(R->size(), 6);
    for (uint64_t V : *R)
      W.emitVBR(V, 6);
  }
  // The pad block fills what is left up to the kind block's END_BLOCK word,
  // which ends where the old block ended.
  uint64_t PadLength = W.enterBlock(K->Width, PadBlockId, PadCodeWidth);
  uint64_t BodyStart = W.Pos, BodyEnd = K->End - 32;
  if (BodyEnd < BodyStart + 32)
    return Bitcode.str(); // No room: the kinds dropped were too few.
  // One record of N zero operands and the END_BLOCK, within the body's
  // last word: Bits(N) in (Room - 32, Room].
  uint64_t Room = BodyEnd - BodyStart;
  auto Bits = [&](uint64_t N) {
    return 2 * PadCodeWidth + 6 + vbr6Bits(N) + 6 * N;
  };
  uint64_t N = Room / 6;
  while (N && Bits(N) > Room)
    --N;
  if (Bits(N) > Room)
    return Bitcode.str();
  W.emit(bitc::UNABBREV_RECORD, PadCodeWidth);
  W.emitVBR(0, 6); // Code 0: no meaning to anyone.
  W.emitVBR(N, 6);
  for (uint64_t I = 0; I < N; ++I)
    W.emitVBR(0, 6);
  W.endBlock(PadCodeWidth, PadLength);
  W.endBlock(K->Width, KindLength);
  if (W.Pos != K->End)
    return Bitcode.str(); // Cannot happen: the sizes above add up.
  W.Bytes.append(Bitcode.substr(K->End / 8).str());
  // The result must read back as the same kinds.
  Expected<KindBlock> Check = findKindBlock(W.Bytes);
  if (!Check || Check->Kinds.size() != Keep.size() ||
      Check->End != K->End) {
    if (!Check)
      consumeError(Check.takeError());
    return Bitcode.str();
  }
  return std::move(W.Bytes);
}

} // namespace tc
