//! The draw from top-k candidates (`Op::Sample`): [`SampleParams::pick`] per row, the function
//! wgllm-models' host sampler calls too, so on this backend a step's drawn token equals the host
//! sampler's draw from the same candidates and uniform.

use wgllm_core::op::SampleParams;
use wgllm_core::Result;

use crate::Ctx;

/// `Op::Sample`: per row, the id of the candidate [`SampleParams::pick`] picks.
pub(crate) fn sample(ctx: &mut Ctx) -> Result<()> {
    let vals = ctx.dense(0)?;
    let ids = ctx.ints(1)?;
    let params = ctx.dense(2)?;
    let k = vals.ne[0];
    let w = SampleParams::WORDS as usize;
    let out: Vec<i32> = (0..vals.nrows())
        .map(|r| {
            let mut v = [0f32; 5];
            v.copy_from_slice(&params.data[r * w..(r + 1) * w]);
            let i = SampleParams::from_values(v).pick(&vals.data[r * k..(r + 1) * k]);
            ids[r * k + i] as i32
        })
        .collect();
    ctx.write_i32(&out)
}
