//! What is checked before a run: the device bytes a pass needs, and that every input value
//! fits the storage type.

use linattn_core::{AttnError, Precision, Shape, Tensor, TensorRole};
use linattn_cuda::memory::StorageElem;

/// Bytes one pass allocates on the device beyond the staged inputs (see the module docs).
pub fn device_bytes_needed(
    shape: &Shape,
    precision: Precision,
    backward: bool,
) -> Result<u64, AttnError> {
    let overflow = || AttnError::SizeOverflow(format!("softmax score matrices for {shape}"));
    let elem = precision.bytes() as u64;
    let seq = shape.seq as u64;
    let square = (shape.bh() as u64)
        .checked_mul(seq)
        .and_then(|x| x.checked_mul(seq))
        .ok_or_else(overflow)?;
    let (qk, v) = (shape.qk_len()? as u64, shape.v_len()? as u64);
    let elements = if backward {
        // P, dS, O, dQ, dK, dV
        square
            .checked_mul(2)
            .and_then(|x| x.checked_add(2 * v + 2 * qk))
    } else {
        square.checked_add(v)
    };
    elements
        .and_then(|x| x.checked_mul(elem))
        .ok_or_else(overflow)
}

/// Refuses a value that the conversion to the storage type turns into ±Inf (beyond 65504 for
/// f16), naming the tensor, rather than letting it become a NaN output.
pub(super) fn check_storage_range<T: StorageElem>(
    t: &Tensor,
    role: TensorRole,
) -> Result<(), AttnError> {
    let data = t.data();
    match data
        .iter()
        .position(|&x| !T::from_f64(x).to_f64().is_finite())
    {
        None => Ok(()),
        Some(index) => Err(AttnError::InvalidArgument(format!(
            "{} holds {} at flat index {index}, outside the range of {}",
            role.name(),
            data[index],
            T::PRECISION
        ))),
    }
}

/// `t` converted to the storage type; a value that the conversion turns into ±Inf (beyond
/// 65504 for f16) is refused, naming the tensor, rather than becoming a NaN output.
pub fn to_storage<T: StorageElem>(t: &Tensor, role: TensorRole) -> Result<Vec<T>, AttnError> {
    check_storage_range::<T>(t, role)?;
    Ok(t.data().iter().map(|&x| T::from_f64(x)).collect())
}
