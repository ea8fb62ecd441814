//! `causal_recurrent.cu` itself: its source and the argument struct of every entry point
//! (what the launches in `launch.rs` pass and the grids in `geometry.rs` are named after).

pub const SOURCE_NAME: &str = "causal_recurrent.cu";
pub const SOURCE: &str = include_str!("../../../../kernels/causal_recurrent.cu");

pub use params::SPECS as KERNEL_PARAMS;

pub use params::ENTRIES as ENTRY_POINTS;

crate::kernel_params! {
    /// The argument structs of causal_recurrent.cu's entry points.
    pub mod params;
    /// `cr_forward`: the forward scan, O and den.
    pub struct Forward => "cr_forward" {
        q: Ptr, k: Ptr, v: Ptr, out: Ptr, den_out: Ptr, q_log_scale: Ptr, k_log_scale: Ptr,
        n: i32, c_dim: i32, m_dim: i32, decay: f32, eps: f32,
    }
    /// `cr_forward_stored`: the forward scan writing every S_i, z_i as well.
    pub struct ForwardStored => "cr_forward_stored" {
        q: Ptr, k: Ptr, v: Ptr, out: Ptr, den_out: Ptr, states: Ptr, z_states: Ptr,
        q_log_scale: Ptr, k_log_scale: Ptr, n: i32, c_dim: i32, m_dim: i32, decay: f32,
        eps: f32,
    }
    /// `cr_backward_go`: the forward scan writing only G·O partials (fp32 O for gd).
    pub struct BackwardGo => "cr_backward_go" {
        q: Ptr, k: Ptr, v: Ptr, g: Ptr, go: Ptr, q_log_scale: Ptr, k_log_scale: Ptr, n: i32,
        c_dim: i32, m_dim: i32, decay: f32, eps: f32,
    }
    /// `cr_backward_dq`: the ∂Q scan.
    pub struct BackwardDq => "cr_backward_dq" {
        q: Ptr, k: Ptr, v: Ptr, g: Ptr, den: Ptr, gd: Ptr, out: Ptr, n: i32, c_dim: i32,
        m_dim: i32, decay: f32,
    }
    /// `cr_backward_dk`: the reverse ∂K scan.
    pub struct BackwardDk => "cr_backward_dk" = BackwardDq;
    /// `cr_backward_dv`: the reverse ∂V scan.
    pub struct BackwardDv => "cr_backward_dv" {
        q: Ptr, k: Ptr, g: Ptr, den: Ptr, dv: Ptr, n: i32, c_dim: i32, m_dim: i32, decay: f32,
    }
    /// `cr_backward_prep`: gd = −G·O/den per token.
    pub struct BackwardPrep => "cr_backward_prep" {
        g: Ptr, out: Ptr, go: Ptr, slices: i32, den: Ptr, gd: Ptr, tokens: i64, m_dim: i32,
    }
    /// `cr_backward_dq_from_states`: ∂Q (and gd) from the stored S_i, z_i.
    pub struct BackwardDqFromStates => "cr_backward_dq_from_states" {
        q: Ptr, g: Ptr, den: Ptr, gd: Ptr, states: Ptr, z_states: Ptr, dq: Ptr, n: i32,
        c_dim: i32, m_dim: i32,
    }
}
