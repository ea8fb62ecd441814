//! `.npy` reading and writing: round trips, every header form, and each refusal.

use super::*;

fn sample(dims: [usize; 4]) -> Tensor {
    let len: usize = dims.iter().product();
    let data = (0..len)
        .map(|i| (i as f64 * 0.37).sin() * 3.0 + 0.125)
        .collect();
    Tensor::from_vec(dims, data).unwrap()
}

use npyz::WriterBuilder;

/// A .npy file written by npyz (an independent writer), in the given dtype.
fn npyz_bytes<T: npyz::AutoSerialize + Copy>(dims: [usize; 4], data: &[T]) -> Vec<u8> {
    let mut buf = std::io::Cursor::new(Vec::new());
    let shape: Vec<u64> = dims.iter().map(|&d| d as u64).collect();
    let mut writer = npyz::WriteOptions::new()
        .default_dtype()
        .shape(&shape)
        .writer(&mut buf)
        .begin_nd()
        .unwrap();
    writer.extend(data.iter().copied()).unwrap();
    writer.finish().unwrap();
    buf.into_inner()
}

/// Every file of `cases` is refused with a reason containing its needle.
fn assert_all_refused(cases: Vec<(Vec<u8>, &str)>) {
    for (bytes, needle) in cases {
        let reason = parse_npy(&bytes).unwrap_err();
        assert!(reason.contains(needle), "expected '{needle}' in '{reason}'");
    }
}

/// A version-1 file of header `dict` and `data`, the header padded with spaces so the
/// data starts 64-aligned, as numpy writes it.
fn with_header(dict: &str, data: &[u8]) -> Vec<u8> {
    let padding = (64 - (10 + dict.len() + 1) % 64) % 64;
    with_raw_header(&format!("{dict}{}", " ".repeat(padding)), data)
}

/// A version-1 file of header `dict` (unpadded) and `data`.
fn with_raw_header(dict: &str, data: &[u8]) -> Vec<u8> {
    let mut out = MAGIC.to_vec();
    out.extend_from_slice(&[1, 0]);
    let header = format!("{dict}\n");
    out.extend_from_slice(&(header.len() as u16).to_le_bytes());
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(data);
    out
}

#[test]
fn f64_round_trip_is_exact() {
    let t = sample([2, 3, 5, 4]);
    let bytes = encode_npy(&t, NpyDtype::F64);
    assert_eq!(
        bytes.len() % 64,
        (t.len() * 8) % 64,
        "data starts 64-aligned"
    );
    let back = parse_npy(&bytes).unwrap();
    assert_eq!(back.dtype, NpyDtype::F64);
    assert_eq!(back.tensor, t);
}

#[test]
fn f32_round_trip_rounds_once() {
    let t = sample([1, 2, 3, 7]);
    let back = parse_npy(&encode_npy(&t, NpyDtype::F32)).unwrap();
    assert_eq!(back.dtype, NpyDtype::F32);
    for (a, b) in t.data().iter().zip(back.tensor.data()) {
        assert_eq!(*b, f64::from(*a as f32));
    }
}

#[test]
fn reads_what_npyz_writes_and_npyz_reads_what_we_write() {
    let dims = [2, 1, 3, 2];
    let vals: Vec<f32> = (0..12).map(|i| i as f32 * 0.5 - 2.0).collect();
    let ours = parse_npy(&npyz_bytes(dims, &vals)).unwrap();
    assert_eq!(ours.dtype, NpyDtype::F32);
    assert_eq!(ours.tensor.dims(), dims);
    assert_eq!(ours.tensor.data()[5], 0.5);

    let t = sample(dims);
    let bytes = encode_npy(&t, NpyDtype::F64);
    let file = npyz::NpyFile::new(&bytes[..]).unwrap();
    assert_eq!(file.shape(), &[2, 1, 3, 2]);
    assert_eq!(file.into_vec::<f64>().unwrap(), t.data());
}

#[test]
fn versions_two_and_three_are_read() {
    let t = sample([1, 1, 2, 3]);
    let v1 = encode_npy(&t, NpyDtype::F64);
    let header_len = u16::from_le_bytes([v1[8], v1[9]]) as usize;
    // The 2-byte-longer prefix takes 2 spaces off the padding: the data stays 64-aligned.
    let header_len = header_len - 2;
    let (dict, data) = (&v1[10..10 + header_len - 1], &v1[10 + header_len + 2..]);
    for version in [2u8, 3] {
        let mut v = MAGIC.to_vec();
        v.extend_from_slice(&[version, 0]);
        v.extend_from_slice(&(header_len as u32).to_le_bytes());
        v.extend_from_slice(dict);
        v.push(b'\n');
        v.extend_from_slice(data);
        assert_eq!(v.len() - data.len(), 12 + header_len);
        let back = parse_npy(&v).unwrap();
        assert_eq!(back.tensor, t, "version {version}");
    }
}

#[test]
fn refusals_name_the_problem() {
    let eight = [0u8; 8];
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (b"hello world, not numpy".to_vec(), "not a .npy file"),
        (MAGIC.to_vec(), "truncated header"),
        (
            {
                let mut v = MAGIC.to_vec();
                v.extend_from_slice(&[9, 0, 0, 0]);
                v
            },
            "version 9.0",
        ),
        (
            with_header(
                "{'descr': '<i8', 'fortran_order': False, 'shape': (1, 1, 1, 1), }",
                &eight,
            ),
            "'<i8'",
        ),
        (
            with_header(
                "{'descr': '>f4', 'fortran_order': False, 'shape': (1, 1, 1, 2), }",
                &eight,
            ),
            "'>f4'",
        ),
        // 10 bytes of prefix, 69 of header: the data starts at byte 79, not 8-aligned.
        (
            with_raw_header(
                "{'descr': '<f8', 'fortran_order': False, 'shape': (1, 1, 1, 1), }   ",
                &eight,
            ),
            "misaligned data: it starts at byte 79",
        ),
        (
            with_header(
                "{'descr': '<f8', 'fortran_order': False, 'shape': (1, 1, 1, 2), }",
                &[0u8; 13],
            ),
            "data of 13 bytes is not a whole number of 8-byte",
        ),
        (
            with_header(
                "{'descr': '<f8', 'fortran_order': False, 'shape': (1, 1), }",
                &eight,
            ),
            "4-D",
        ),
        (
            with_header(
                "{'descr': '<f8', 'fortran_order': False, 'shape': (1, 1, 1, 2), }",
                &eight,
            ),
            "truncated data",
        ),
        (
            with_header(
                "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 1, 1, 1), }",
                &eight,
            ),
            "unexpected bytes",
        ),
        (
            with_header("{'descr': '<f8', 'shape': (1, 1, 1, 1), }", &eight),
            "malformed",
        ),
    ];
    assert_all_refused(cases);
}

/// Inputs the fuzzer (fuzz/, target npy_reader) found to panic or to allocate without
/// bound before the header was parsed here: each must now be a plain refusal.
#[test]
fn fuzzer_findings_are_refused() {
    let eight = [0u8; 8];
    let t40 = 1u64 << 40;
    let cases: Vec<(Vec<u8>, &str)> = vec![
        // npyz multiplied the dimensions unchecked (overflow panic with debug assertions).
        (
            with_header(
                &format!(
                    "{{'descr': '<f8', 'fortran_order': False, 'shape': ({t40}, {t40}, {t40}, {t40}), }}"
                ),
                &eight,
            ),
            "overflows",
        ),
        (
            with_header(
                &format!(
                    "{{'descr': '<f8', 'fortran_order': False, 'shape': ({t40}, {t40}, {t40}, {t40}, {t40}), }}"
                ),
                &eight,
            ),
            "4-D",
        ),
        (
            with_header(
                "{'descr': '<f8', 'fortran_order': False, 'shape': (1, 1, 1, 100000000000000000000000), }",
                &eight,
            ),
            "does not fit",
        ),
        // npyz allocated the announced header length (up to 4 GiB) before reading it.
        (
            {
                let mut v = MAGIC.to_vec();
                v.extend_from_slice(&[2, 0]);
                v.extend_from_slice(&u32::MAX.to_le_bytes());
                v.extend_from_slice(b"{'descr': '<f8'");
                v
            },
            "4294967295 bytes announced",
        ),
        (
            {
                let mut v = MAGIC.to_vec();
                v.extend_from_slice(&[1, 0, 7]);
                v
            },
            "no header length",
        ),
        (
            with_header("{'descr': '<f8', 'fortran_order': False, 'shape': (1, 1, 1, -1), }", &eight),
            "negative",
        ),
        (with_header("[1, 2]", &eight), "dict"),
        // py_literal backtracked exponentially: 50 unclosed braces hung (fuzzer timeout).
        (
            with_header(
                &format!(
                    "{{'descr': '<f4', 'fortran_order': False, 'shape':{} (1, 0, 3, 4), }}",
                    "{".repeat(50)
                ),
                &eight,
            ),
            "nested more than 4 deep",
        ),
    ];
    assert_all_refused(cases);
}

#[test]
fn fortran_order_is_converted_to_c_order() {
    let dims = [2, 3, 4, 5];
    let t = sample(dims);
    // Fortran order: the first index varies fastest.
    let mut data = Vec::new();
    for i3 in 0..5 {
        for i2 in 0..4 {
            for i1 in 0..3 {
                for i0 in 0..2 {
                    let x = t.data()[((i0 * 3 + i1) * 4 + i2) * 5 + i3];
                    data.extend_from_slice(&x.to_le_bytes());
                }
            }
        }
    }
    let bytes = with_header(
        "{'descr': '<f8', 'fortran_order': True, 'shape': (2, 3, 4, 5), }",
        &data,
    );
    let back = parse_npy(&bytes).unwrap();
    assert_eq!(back.tensor, t);
    let empty = with_header(
        "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 0, 4, 5), }",
        &[],
    );
    assert_eq!(parse_npy(&empty).unwrap().tensor.dims(), [2, 0, 4, 5]);
}

#[test]
fn read_and_write_files_name_the_path() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("o.npy");
    let t = sample([1, 2, 2, 2]);
    write_npy(&path, &t, NpyDtype::F64).unwrap();
    assert_eq!(read_npy(&path).unwrap().tensor, t);
    // No temporary file is left behind.
    assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1);

    let missing = dir.path().join("missing.npy");
    match read_npy(&missing).unwrap_err() {
        AttnError::BadFile { path, reason } => {
            assert!(path.ends_with("missing.npy"));
            assert!(reason.starts_with("cannot read"), "{reason}");
        }
        e => panic!("unexpected {e:?}"),
    }
}

#[test]
fn zero_sized_dims_are_read_as_such() {
    // Empty arrays are valid .npy; refusing them is the caller's business (EmptyDim).
    let bytes = with_header(
        "{'descr': '<f8', 'fortran_order': False, 'shape': (1, 0, 3, 2), }",
        &[],
    );
    assert_eq!(parse_npy(&bytes).unwrap().tensor.dims(), [1, 0, 3, 2]);
}
