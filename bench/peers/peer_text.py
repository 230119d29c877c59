# The PyTorch peer's text pairs (W7; bench/peers/peer.py): a SentencePiece model read without the sentencepiece
# package where it is missing, and src/data/text_pairs.cpp's samples and padded batches.
import torch


def _proto_fields(buf):
    """(field number, wire type, value) of a protobuf message: enough to read a SentencePiece .model file."""
    pos, out = 0, []

    def varint():
        nonlocal pos
        shift = value = 0
        while True:
            b = buf[pos]
            pos += 1
            value |= (b & 0x7F) << shift
            shift += 7
            if b < 0x80:
                return value

    while pos < len(buf):
        key = varint()
        field, wire = key >> 3, key & 7
        if wire == 0:
            out.append((field, wire, varint()))
        elif wire == 1:
            out.append((field, wire, buf[pos:pos + 8]))
            pos += 8
        elif wire == 2:
            n = varint()
            out.append((field, wire, buf[pos:pos + n]))
            pos += n
        elif wire == 5:
            out.append((field, wire, buf[pos:pos + 4]))
            pos += 4
        else:
            raise ValueError(f"protobuf wire type {wire} not handled")
    return out


class SentencePieceBpe:
    """Encoding with a SentencePiece model: the `sentencepiece` package when it is installed, else this reading of
    its BPE algorithm (bpe_model.cc): normalise (NFKC, extra whitespace removed, a "\u2581" prefix, spaces to
    "\u2581"), split into characters, then repeatedly merge the adjacent pair whose concatenation is a piece with the
    highest score (the leftmost on ties); pieces not in the vocabulary become <unk>, a run of them one <unk>. Enough for the example's
    vocabulary (bellows trains it: model_type bpe, pad 0, unk 1, [CLS] 2, [SEP] 3): on the example's 4,200 sentences
    (and a few with unknown characters and extra spaces) it gave the sentencepiece package's ids exactly."""

    def __init__(self, path):
        import struct
        with open(path, "rb") as f:
            raw = f.read()
        self.pieces, self.scores, self.types = [], [], []
        self.model_type, normalizer = 1, {}
        for field, wire, value in _proto_fields(raw):
            if field == 1 and wire == 2:
                piece, score, kind = "", 0.0, 1
                for f2, w2, v2 in _proto_fields(value):
                    if f2 == 1:
                        piece = v2.decode("utf-8")
                    elif f2 == 2:
                        score = struct.unpack("<f", v2)[0]
                    elif f2 == 3:
                        kind = v2
                self.pieces.append(piece)
                self.scores.append(score)
                self.types.append(kind)
            elif field == 2 and wire == 2:  # TrainerSpec; its field 3 is model_type (1 unigram, 2 bpe)
                self.model_type = dict((f2, v2) for f2, w2, v2 in _proto_fields(value) if w2 == 0).get(3, 1)
            elif field == 3 and wire == 2:
                normalizer = {f2: v2 for f2, w2, v2 in _proto_fields(value)}
        self.add_dummy_prefix = bool(normalizer.get(3, 1))
        self.remove_extra_whitespaces = bool(normalizer.get(4, 1))
        self.escape_whitespaces = bool(normalizer.get(5, 1))
        self.ids = {p: i for i, p in enumerate(self.pieces) if self.types[i] in (1, 4, 5)}  # normal, user, unused
        self.unk_id = self.types.index(2)
        self.sp = None
        try:
            import sentencepiece
            self.sp = sentencepiece.SentencePieceProcessor(model_file=path)
        except ImportError:
            if self.model_type != 2:
                raise RuntimeError(f"{path} is not a BPE model: install sentencepiece to encode with it")

    def piece_id(self, piece):
        return self.pieces.index(piece)

    def normalize(self, text):
        import unicodedata
        text = unicodedata.normalize("NFKC", text)
        if self.remove_extra_whitespaces:
            text = " ".join(t for t in text.split(" ") if t)
        if not text:
            return ""
        if self.add_dummy_prefix:
            text = " " + text
        return text.replace(" ", "\u2581") if self.escape_whitespaces else text

    def encode(self, text):
        if self.sp is not None:
            return self.sp.encode(text)
        import heapq
        symbols = list(self.normalize(text))
        if not symbols:
            return []
        prev = list(range(-1, len(symbols) - 1))
        nxt = list(range(1, len(symbols) + 1))
        nxt[-1] = -1
        heap = []

        def add(left, right):
            if left < 0 or right < 0:
                return
            piece = symbols[left] + symbols[right]
            i = self.ids.get(piece)
            if i is not None:
                heapq.heappush(heap, (-self.scores[i], left, right, piece))

        for k in range(1, len(symbols)):
            add(k - 1, k)
        while heap:
            _, left, right, piece = heapq.heappop(heap)
            if not symbols[left] or not symbols[right] or symbols[left] + symbols[right] != piece:
                continue  # stale: one side was merged since
            symbols[left], symbols[right] = piece, ""
            nxt[left] = nxt[right]
            if nxt[right] >= 0:
                prev[nxt[right]] = left
            add(prev[left], left)
            add(left, nxt[left])
        out = []
        for sym in symbols:
            if sym:
                i = self.ids.get(sym, self.unk_id)
                if not (i == self.unk_id and out and out[-1] == self.unk_id):  # a run of unknowns is one <unk>
                    out.append(i)
        return out


class TextPairBatches:
    """src/data/text_pairs.cpp: a TSV with a header (premise, hypothesis, label columns; no quoting), labels in
    the configured class order, each sentence encoded once; sample [CLS] a [SEP] b [SEP] with segments 0/1,
    longest-first truncation to max_len; a batch pads to its longest sample with the pad id, x_mask true at
    tokens. The vocabulary is the one bellows trained and cached beside the data (<file>.spm-bpe-512.model)."""

    def __init__(self, path, batch_size, tokenizer, labels=("entailment", "neutral", "contradiction"), max_len=128):
        self.tok = SentencePieceBpe(tokenizer)
        # tokenizer.cpp: the pad piece, else <unk>; [CLS] and [SEP] by piece
        self.pad_id = self.tok.pieces.index("<pad>") if "<pad>" in self.tok.pieces else self.tok.unk_id
        self.cls_id, self.sep_id = self.tok.piece_id("[CLS]"), self.tok.piece_id("[SEP]")
        self.vocab_size = len(self.tok.pieces)
        with open(path, encoding="utf-8", newline="") as f:
            lines = f.read().split("\n")
        rows, header = [], None
        for line in lines:
            if line.endswith("\r"):
                line = line[:-1]
            if header is None and line.startswith("\ufeff"):
                line = line[1:]
            if not line:
                continue
            if header is None:
                header = line.split("\t")
                ip, ih, il = header.index("premise"), header.index("hypothesis"), header.index("label")
                continue
            fields = line.split("\t")
            rows.append((fields[ip], fields[ih], labels.index(fields[il])))
        self.samples = []
        for a, b, y in rows:
            ta, tb = self.tok.encode(a), self.tok.encode(b)
            la, lb = self.truncate(len(ta), len(tb), max_len)
            ids = [self.cls_id] + ta[:la] + [self.sep_id] + tb[:lb] + [self.sep_id]
            seg = [0] * (la + 2) + [1] * (lb + 1)
            self.samples.append((ids, seg, y))
        self.n, self.batch_size = len(self.samples), batch_size
        self.per_epoch = (self.n + batch_size - 1) // batch_size
        self.cache = {}

    @staticmethod
    def truncate(a, b, max_len):
        budget = max(max_len - 3, 0)
        if a + b <= budget:
            return a, b
        half = budget // 2
        if a >= b and b <= half:
            return budget - b, b
        if b > a and a <= half:
            return a, budget - a
        return budget - half, half

    def prepare(self, plan):
        for epoch, k in plan:
            if k in self.cache:
                continue
            part = self.samples[k * self.batch_size:(k + 1) * self.batch_size]
            longest = max(len(ids) for ids, _, _ in part)
            x = torch.full((len(part), longest), self.pad_id, dtype=torch.long)
            seg = torch.zeros((len(part), longest), dtype=torch.long)
            lengths = torch.tensor([len(ids) for ids, _, _ in part], dtype=torch.long)
            for i, (ids, sg, _) in enumerate(part):
                x[i, :len(ids)] = torch.tensor(ids)
                seg[i, :len(sg)] = torch.tensor(sg)
            y = torch.tensor([lab for _, _, lab in part], dtype=torch.long)
            mask = torch.arange(longest).unsqueeze(0) < lengths.unsqueeze(1)
            self.cache[k] = [x, seg, mask, y]

    def batch(self, epoch, k):
        return self.cache[k]
