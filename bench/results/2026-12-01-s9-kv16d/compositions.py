"""How far two compositions of passes (prefill n - 1 tokens then decode one, against one prefill
of n) land apart in logits, with a float32 and with a float16 KV cache, beside how far the
float16 cache moves one prefill's logits from the float32 one's; and how many of layer 0's
cached keys the two compositions store differently. Printed, not asserted
(tests/model/test_kv_cache.py's RAGGED_TOLERANCE cites it).

    .venv/bin/python bench/results/2026-12-01-s9-kv16d/compositions.py
"""

import numpy as np
from corral.model import load_model
from corral.model import quant as model_quant
from corral.model.kv_cache import KVCache

model_quant.INT8_ACTIVATIONS = False  # as the test: float32 activations in the blocks' kernels
model = load_model(progress=False)


def random_ids(n, seed):
    return np.random.default_rng(seed).integers(3, model.vocab_size, n).tolist()


def one_prefill(ids, dtype):
    return model.prefill(KVCache(model.config, 1, len(ids), dtype), 0, ids)


def main() -> None:
    for draw in range(6):
        sizes = (4, 19, 9) if draw == 0 else np.random.default_rng(100 + draw).integers(2, 30, 3)
        sequences = [random_ids(int(n), draw * 100 + int(n)) for n in sizes]
        apart = {}
        for dtype in (np.float32, np.float16):
            cache = KVCache(model.config, 3, 32, dtype)
            for slot, ids in enumerate(sequences):
                model.prefill(cache, slot, ids[:-1])
            batch = model.decode(cache, [1, 0, 2], [sequences[s][-1] for s in (1, 0, 2)])
            apart[dtype] = max(
                np.abs(batch[row] - one_prefill(sequences[slot], dtype)).max()
                for row, slot in enumerate([1, 0, 2])
            )
        moved = max(
            np.abs(one_prefill(s, np.float16) - one_prefill(s, np.float32)).max() for s in sequences
        )
        print(f"draw {draw}, lengths {[int(n) for n in sizes]}: compositions apart, float32 "
              f"{apart[np.float32]:.2e}, float16 {apart[np.float16]:.2e}; float16 against "
              f"float32, one prefill: {moved:.2e}", flush=True)  # fmt: skip
    ids = random_ids(4, 4)
    for dtype in (np.float32, np.float16):
        split, whole = KVCache(model.config, 1, 4, dtype), KVCache(model.config, 1, 4, dtype)
        model.prefill(split, 0, ids[:-1])
        model.decode(split, [0], [ids[-1]])
        model.prefill(whole, 0, ids)
        differ = split.keys[0, 0] != whole.keys[0, 0]  # layer 0: [Hkv, T, hd]
        print(f"{np.dtype(dtype).name} cache, 3 + 1 tokens against 4: layer 0 keys stored "
              f"differently {differ.mean():.1%}, at positions "
              f"{sorted(set(np.nonzero(differ)[1].tolist()))}", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
