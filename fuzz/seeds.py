#!/usr/bin/env python3
"""Seed inputs for the fuzz targets, written into fuzz/corpus/<target>/ (then minimised with
`cargo +nightly fuzz cmin -a <target> -- -use_counters=0`): .npy files of both dtypes the
reader accepts ('<f4', '<f8') in format versions 1.0, 2.0 and 3.0, one per refusal of the
reader, and grid files in TOML and JSON (the regress grid, the unit tests' grids, every
field). Standard library only: no numpy needed."""
import json
import math
import os
import struct

here = os.path.dirname(os.path.abspath(__file__))
root = os.path.dirname(here)
MAGIC = b'\x93NUMPY'


def npy(descr, shape, data, version=1, fortran=False, dict_text=None, pad=True):
    d = dict_text if dict_text is not None else "{'descr': '%s', 'fortran_order': %s, 'shape': %s, }" % (
        descr, 'True' if fortran else 'False',
        '(' + ', '.join(str(s) for s in shape) + (',)' if len(shape)==1 else ')'))
    prefix = 10 if version == 1 else 12
    hb = d.encode('utf-8' if version == 3 else 'latin1')
    n = prefix + len(hb) + 1
    padding = (64 - n % 64) % 64 if pad else 0
    hb = hb + b' '*padding + b'\n'
    lenb = struct.pack('<H', len(hb)) if version == 1 else struct.pack('<I', len(hb))
    return MAGIC + bytes([version, 0]) + lenb + hb + data
def vals(shape, fmt):
    n = math.prod(shape)
    xs = [math.sin(i*0.37)*3+0.125 for i in range(n)]
    return b''.join(struct.pack(fmt, x) for x in xs)
out = os.path.join(here, 'corpus', 'npy_reader')
os.makedirs(out, exist_ok=True)
def w(name, b): open(os.path.join(out, name), 'wb').write(b)
# Valid: both accepted dtypes, each format version.
for descr, fmt in [('<f4','<f'), ('<f8','<d')]:
    for v in (1,2,3):
        shape=(1,2,3,2)
        w(f'valid_{descr[1:]}_v{v}.npy', npy(descr, shape, vals(shape, fmt), version=v))
    w(f'valid_{descr[1:]}_empty.npy', npy(descr, (1,0,3,2), b''))
    w(f'valid_{descr[1:]}_single.npy', npy(descr, (1,1,1,1), vals((1,1,1,1), fmt)))
# Valid with numpy's other spellings: double quotes, no trailing comma, keys reordered.
w('valid_f4_dquote.npy', npy(None, None, vals((1,1,2,2),'<f'), dict_text='{"shape": (1, 1, 2, 2), "fortran_order": False, "descr": "<f4"}'))
# Unpadded: the data starts at byte 76, 4-aligned (whole '<f4' elements), not 64-aligned.
w('valid_f4_unpadded.npy', npy('<f4', (2,1,1,1), vals((2,1,1,1),'<f'), pad=False))
# Fortran order (first index fastest): read and converted to C order.
w('valid_f8_fortran.npy', npy('<f8', (2,1,1,2), vals((2,1,1,2),'<d'), fortran=True))
# Malformed: each refusal of the reader.
eight = b'\0'*8
w('bad_magic.npy', b'hello world, not numpy')
w('bad_truncated_magic.npy', MAGIC)
w('bad_version.npy', MAGIC + bytes([9,0,0,0]))
w('bad_dtype_i8.npy', npy('<i8', (1,1,1,1), eight))
w('bad_dtype_bigendian.npy', npy('>f4', (1,1,1,2), eight))
w('bad_dtype_struct.npy', npy(None, None, eight, dict_text="{'descr': [('a', '<f4'), ('b', '<f4')], 'fortran_order': False, 'shape': (1, 1, 1, 1), }"))
w('bad_rank2.npy', npy('<f8', (1,1), eight))
w('bad_truncated_data.npy', npy('<f8', (1,1,1,2), eight))
w('bad_misaligned_offset.npy', npy('<f8', (2,1,1,1), vals((2,1,1,1),'<d'), pad=False))
w('bad_misaligned_length.npy', npy('<f8', (1,1,1,2), eight + b'\0'*5))
w('bad_extra_bytes.npy', npy('<f4', (1,1,1,1), eight))
w('bad_missing_key.npy', npy(None, None, eight, dict_text="{'descr': '<f8', 'shape': (1, 1, 1, 1), }"))
w('bad_huge_shape.npy', npy('<f8', (2**40, 2**40, 2**40, 2**40), eight))
w('bad_header_len.npy', MAGIC + bytes([1,0]) + struct.pack('<H', 60000) + b"{'descr': '<f8'")

out = os.path.join(here, 'corpus', 'grid_file')
os.makedirs(out, exist_ok=True)
def t(name, text): open(os.path.join(out, name), 'w').write(text)
t('regress-grid.toml', open(os.path.join(root, 'bench-results', 'regress-grid.toml')).read())
t('test-grid.toml', 'n = ["2^8", 1024]\nbatch = 2\nheads = [4]\nmode = "forward"\ncausality = ["causal", "non-causal"]\nmap = "relu"\n')
t('test-grid.json', '{"n_min": "2^8", "n_max": 2048, "dk": [32, 64]}')
t('every-field.toml', '''n_min = "2^8"
n_max = 4096
batch = "1,2"
heads = [2, "2^2"]
dk = [32, 64]
dv = 48
backends = ["cpu/*", "cuda/*f16"]
precision = "f32,f16"
causality = "causal,non-causal"
map = ["elu+1", "favor:64", "1+cos", "softmax", "identity", "efficient"]
mode = ["forward", "forward+backward"]
eps = 1e-6
decay = 0.99
warmup = 1
repeats = 3
min_repeats = 2
cell_seconds = 0.5
max_cell_seconds = 30.0
flush_l2 = true
seed = 42
''')
t('every-field.json', json.dumps({"n": ["2^10", 4096], "batch": 1, "heads": "8", "dk": [64, 128], "dv": [64],
  "backends": "cpu/*", "precision": ["f32", "bf16", "f64"], "causality": ["non-causal"], "map": "favor:16",
  "mode": "forward+backward", "eps": 0.0, "decay": 1.0, "warmup": 0, "repeats": 1, "min_repeats": 1,
  "cell_seconds": 2.5, "max_cell_seconds": 60, "flush_l2": False, "seed": 7}, indent=2))
t('bad-typo.toml', 'heads_ = 3\n')
t('bad-values.toml', 'n = "2^99"\nmin_repeats = 0\nmap = "favor:0"\ncell_seconds = -1.0\n')
t('bad-json-as-toml.toml', '{"n": [1, 2], "mode": "backward"}\n')
