//! Rust reference implementations of the kernel suite, and the comparison rules.
//!
//! Integer kernels are compared bitwise. Float kernels run the same operations in the same order
//! as the C (no fused multiply-add on either side: the C is built with `-ffp-contract=off`, and
//! Rust never contracts), so elementwise ops, max and pooling are expected to be bitwise equal
//! too; the accumulating kernels (sum, matmul, conv2d, dense) are checked against a bound that
//! would also admit a different summation order, `|got - want| <= n * eps * sum|terms|`
//! ([`ACC_BOUND_EPS`] eps per term), and the tests report the observed ulp distance. `expf` and
//! softmax are checked against `f64::exp`: [`EXPF_MAX_ULP`] ulp for expf in the normal range,
//! [`SOFTMAX_MAX_REL`] relative per softmax output.

/// Stated bound of the runtime's `hrx_expf` in ulp against the correctly rounded result, for
/// results in the normal range (see `tests/hexagon/kernels/hrx_math.c`).
pub const EXPF_MAX_ULP: u32 = 4;
/// Stated relative bound of a softmax output (row length <= 64) against an f64 reference:
/// expf's 4 ulp, the f32 sum's accumulated rounding (<= 64 eps) and one division.
pub const SOFTMAX_MAX_REL: f32 = 8.0e-6;
/// Per-term factor of the accumulation bound.
pub const ACC_BOUND_EPS: f32 = f32::EPSILON;

/// Distance in ulp between two finite floats of the same sign class (`u32::MAX` if one is NaN).
pub fn ulp_diff(a: f32, b: f32) -> u32 {
    if a.is_nan() || b.is_nan() {
        return if a.is_nan() && b.is_nan() { 0 } else { u32::MAX };
    }
    let key = |x: f32| {
        let i = x.to_bits() as i32;
        if i < 0 {
            i32::MIN.wrapping_sub(i) as i64
        } else {
            i as i64
        }
    };
    (key(a) - key(b)).unsigned_abs().min(u32::MAX as u64) as u32
}

/// Elementwise f32 `a + b`.
pub fn add_f32(a: &[f32], b: &[f32]) -> Vec<f32> {
    a.iter().zip(b).map(|(x, y)| x + y).collect()
}
/// Elementwise f32 `a * b`.
pub fn mul_f32(a: &[f32], b: &[f32]) -> Vec<f32> {
    a.iter().zip(b).map(|(x, y)| x * y).collect()
}
/// f32 ReLU (`x > 0 ? x : +0`; NaN and -0 give +0).
pub fn relu_f32(a: &[f32]) -> Vec<f32> {
    a.iter().map(|&x| if x > 0.0 { x } else { 0.0 }).collect()
}
/// Wrapping i8 add.
pub fn add_i8(a: &[i8], b: &[i8]) -> Vec<i8> {
    a.iter().zip(b).map(|(x, y)| x.wrapping_add(*y)).collect()
}
/// Wrapping i8 multiply (low 8 bits of the product).
pub fn mul_i8(a: &[i8], b: &[i8]) -> Vec<i8> {
    a.iter().zip(b).map(|(x, y)| x.wrapping_mul(*y)).collect()
}
/// i8 ReLU.
pub fn relu_i8(a: &[i8]) -> Vec<i8> {
    a.iter().map(|&x| x.max(0)).collect()
}
/// Wrapping u8 add.
pub fn add_u8(a: &[u8], b: &[u8]) -> Vec<u8> {
    a.iter().zip(b).map(|(x, y)| x.wrapping_add(*y)).collect()
}
/// Wrapping u8 multiply.
pub fn mul_u8(a: &[u8], b: &[u8]) -> Vec<u8> {
    a.iter().zip(b).map(|(x, y)| x.wrapping_mul(*y)).collect()
}
/// Quantized u8 ReLU: `max(x, zero_point)`.
pub fn relu_u8(a: &[u8], zero_point: u8) -> Vec<u8> {
    a.iter().map(|&x| x.max(zero_point)).collect()
}
/// Sequential f32 sum.
pub fn sum_f32(a: &[f32]) -> f32 {
    a.iter().fold(0.0f32, |s, x| s + x)
}
/// f32 max (`-inf` for an empty slice).
pub fn max_f32(a: &[f32]) -> f32 {
    a.iter().fold(f32::NEG_INFINITY, |m, &x| if x > m { x } else { m })
}
/// Exact byte sum.
pub fn sum_u8(a: &[u8]) -> u32 {
    a.iter().map(|&x| x as u32).sum()
}
/// `o[m][n] = sum_k a[m][k] b[k][n]`, k ascending.
pub fn matmul_f32(a: &[f32], b: &[f32], m: usize, k: usize, n: usize) -> Vec<f32> {
    let mut o = vec![0.0f32; m * n];
    for i in 0..m {
        for j in 0..n {
            let mut acc = 0.0f32;
            for t in 0..k {
                acc += a[i * k + t] * b[t * n + j];
            }
            o[i * n + j] = acc;
        }
    }
    o
}
/// Valid 3x3 convolution, stride 1 (layouts as in the C).
pub fn conv2d_f32(input: &[f32], w: &[f32], bias: &[f32], c: usize, h: usize, wd: usize, f: usize) -> Vec<f32> {
    let (oh, ow) = (h - 2, wd - 2);
    let mut out = vec![0.0f32; f * oh * ow];
    for ff in 0..f {
        for y in 0..oh {
            for x in 0..ow {
                let mut acc = bias[ff];
                for cc in 0..c {
                    for ky in 0..3 {
                        for kx in 0..3 {
                            acc += input[(cc * h + y + ky) * wd + x + kx] * w[((ff * c + cc) * 3 + ky) * 3 + kx];
                        }
                    }
                }
                out[(ff * oh + y) * ow + x] = acc;
            }
        }
    }
    out
}
/// 2x2 max pooling, stride 2.
pub fn maxpool2_f32(input: &[f32], c: usize, h: usize, w: usize) -> Vec<f32> {
    let (oh, ow) = (h / 2, w / 2);
    let mut out = vec![0.0f32; c * oh * ow];
    for cc in 0..c {
        for y in 0..oh {
            for x in 0..ow {
                let at = (cc * h + 2 * y) * w + 2 * x;
                let mut m = input[at];
                for v in [input[at + 1], input[at + w], input[at + w + 1]] {
                    if v > m {
                        m = v;
                    }
                }
                out[(cc * oh + y) * ow + x] = m;
            }
        }
    }
    out
}
/// `o[n] = b[n] + sum_k w[n][k] x[k]`.
pub fn dense_f32(x: &[f32], w: &[f32], b: &[f32], k: usize, n: usize) -> Vec<f32> {
    (0..n)
        .map(|j| {
            let mut acc = b[j];
            for t in 0..k {
                acc += w[j * k + t] * x[t];
            }
            acc
        })
        .collect()
}
/// Row-wise softmax in f64 (the reference the f32 kernel is held to).
pub fn softmax_f64(input: &[f32], rows: usize, cols: usize) -> Vec<f64> {
    let mut out = Vec::with_capacity(rows * cols);
    for r in 0..rows {
        let x = &input[r * cols..(r + 1) * cols];
        let m = x.iter().fold(f64::NEG_INFINITY, |m, &v| m.max(v as f64));
        let e: Vec<f64> = x.iter().map(|&v| (v as f64 - m).exp()).collect();
        let s: f64 = e.iter().sum();
        out.extend(e.iter().map(|v| v / s));
    }
    out
}

/// The bound an accumulated result is held to: `n * eps * sum|terms|` plus one ulp of slack for
/// a zero sum.
pub fn acc_bound(abs_terms: f32, n: usize) -> f32 {
    n as f32 * ACC_BOUND_EPS * abs_terms + f32::MIN_POSITIVE
}

/// A small deterministic generator (xorshift32) for inputs and weights.
#[derive(Clone, Debug)]
pub struct Rng(pub u32);

impl Rng {
    /// Next 32 random bits.
    pub fn next_u32(&mut self) -> u32 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        self.0 = x;
        x
    }
    /// Uniform in `[-scale, scale)`.
    pub fn f32(&mut self, scale: f32) -> f32 {
        ((self.next_u32() >> 8) as f32 / (1u32 << 24) as f32 * 2.0 - 1.0) * scale
    }
    /// `n` values uniform in `[-scale, scale)`.
    pub fn f32s(&mut self, n: usize, scale: f32) -> Vec<f32> {
        (0..n).map(|_| self.f32(scale)).collect()
    }
    /// `n` random bytes.
    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next_u32() as u8).collect()
    }
}

/// Little-endian bytes of floats.
pub fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}
/// Floats from little-endian bytes.
pub fn f32s_of(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ulp_distance() {
        assert_eq!(ulp_diff(1.0, 1.0), 0);
        assert_eq!(ulp_diff(1.0, f32::from_bits(1.0f32.to_bits() + 3)), 3);
        assert_eq!(ulp_diff(0.0, -0.0), 0);
        assert_eq!(ulp_diff(f32::from_bits(1), -f32::from_bits(1)), 2);
        assert_eq!(ulp_diff(f32::NAN, 1.0), u32::MAX);
    }

    #[test]
    fn references_agree_with_hand_values() {
        assert_eq!(matmul_f32(&[1.0, 2.0, 3.0, 4.0], &[5.0, 6.0, 7.0, 8.0], 2, 2, 2), vec![19.0, 22.0, 43.0, 50.0]);
        assert_eq!(relu_u8(&[3, 200, 128], 128), vec![128, 200, 128]);
        assert_eq!(mul_i8(&[-128, 16], &[-1, 16]), vec![-128, 0]);
        assert_eq!(maxpool2_f32(&[1.0, 5.0, 2.0, 3.0], 1, 2, 2), vec![5.0]);
        let s = softmax_f64(&[0.0, 0.0], 1, 2);
        assert!((s[0] - 0.5).abs() < 1e-15 && (s[1] - 0.5).abs() < 1e-15);
        let one = conv2d_f32(&[1.0; 9], &[1.0; 9], &[0.5], 1, 3, 3, 1);
        assert_eq!(one, vec![9.5]);
    }
}
