//! `linattn attend` end to end: random q, k, v written as .npy, the binary run, and o.npy
//! compared with linear attention computed here from its definition (SPEC §2), by plain
//! quadratic loops sharing no code with the crates under test (`attend_common`). Bad inputs:
//! `cli_attend_refusals.rs`.

mod attend_common;
mod cli_common;

use attend_common::*;
use cli_common::assert_ok;

#[test]
fn f64_reference_backend_matches_the_definition() {
    let case = Case::new([2, 2, 23, 5], 7, 1, false);
    for map in [Map::EluPlusOne, Map::Relu] {
        for causal in [true, false] {
            // The default form for the causality (recurrent / noncausal), then quadratic.
            for form in [None, Some("quadratic")] {
                let mut flags = vec![
                    "--backend",
                    "cpu-ref",
                    "--map",
                    map.name(),
                    causality_flag(causal),
                ];
                if let Some(f) = form {
                    flags.extend_from_slice(&["--form", f]);
                }
                case.attend_and_check(&flags, map, causal, "<f8", 1e-10);
            }
        }
    }
}

#[test]
fn f32_fast_backend_matches_the_definition() {
    let case = Case::new([1, 3, 70, 8], 6, 2, true);
    for map in [Map::EluPlusOne, Map::Relu] {
        for (causal, form) in [(true, "recurrent"), (false, "noncausal")] {
            let flags = [
                "--backend",
                "cpu",
                "--form",
                form,
                "--precision",
                "f32",
                "--map",
                map.name(),
                causality_flag(causal),
            ];
            let out = case.attend_and_check(&flags, map, causal, "<f4", 1e-5);
            let stdout = String::from_utf8_lossy(&out.stdout);
            assert!(stdout.contains("/f32"), "{stdout}");
        }
    }
}

#[test]
fn gradients_are_written_and_dv_matches_the_definition() {
    let case = Case::new([1, 2, 17, 4], 3, 3, false);
    let d_out = case.path("do.npy");
    for causal in [true, false] {
        let out = case.attend(&[
            "--backend",
            "cpu-ref",
            "--d-out",
            &d_out,
            causality_flag(causal),
        ]);
        assert_ok(&out);
        for (file, dims) in [("dq.npy", [1, 2, 17, 4]), ("dk.npy", [1, 2, 17, 4])] {
            let (descr, got_dims, values) = read_npy(&case.out_dir().join(file));
            assert_eq!((descr.as_str(), got_dims), ("<f8", dims.to_vec()));
            assert!(values.iter().all(|x| x.is_finite()) && values.iter().any(|&x| x != 0.0));
        }
        let (_, _, dv) = read_npy(&case.out_dir().join("dv.npy"));
        // `dV = Aᵀ dO`: the gradient of O = A·V with respect to V (A does not depend on V).
        let want = case.weights_times(&case.d_out, Map::EluPlusOne, causal, true);
        let err = relative_error(&want, &dv);
        assert!(err <= 1e-10, "causal={causal}: dv relative error {err:e}");
    }
}

#[test]
fn fortran_order_inputs_give_the_c_order_output() {
    let case = Case::new([2, 3, 9, 4], 5, 6, false);
    let dir = case.dir.path();
    let [b, h, n, _] = case.dims;
    write_fortran_npy(&dir.join("qf.npy"), case.dims, &case.q);
    write_fortran_npy(&dir.join("kf.npy"), case.dims, &case.k);
    write_fortran_npy(&dir.join("vf.npy"), [b, h, n, case.m], &case.v);
    let flags = ["--backend", "cpu-ref", "--causal"];
    case.attend_and_check(&flags, Map::EluPlusOne, true, "<f8", 1e-10);
    let (_, _, want) = read_npy(&case.out_dir().join("o.npy"));
    let fortran_dir = dir.join("out_fortran");
    let (qf, kf, vf) = (
        case.path("qf.npy"),
        case.path("kf.npy"),
        case.path("vf.npy"),
    );
    assert_ok(&attend_files(&qf, &kf, &vf, &fortran_dir, &flags));
    let (descr, dims, got) = read_npy(&fortran_dir.join("o.npy"));
    assert_eq!((descr.as_str(), dims), ("<f8", vec![b, h, n, case.m]));
    // The same values in another layout: the same output, bit for bit.
    assert_eq!(got, want);
}
