// ggml_interpolate (ggml_compute_forward_upscale_f32), one invocation per destination element.
// op_f 0..3 = scale factor per dim (dst.ne / src.ne, or (ne - 1) / (src.ne - 1) on dims 0 and 1
// with align-corners), op_f 4 = sample offset (0.5, or 0 with align-corners). Dims 2 and 3,
// and every dim in NEAREST, take src[i / scale]; BILINEAR and BICUBIC sample dims 0 and 1 at
// (i + offset) / scale - offset with reads clamped to the edges, in the CPU reference's order.

fn nearest(i: u32, d: u32) -> u32 {
    return min(u32(f32(i) / op_f(d)), t_ne(0u, d) - 1u);
}

fn src_coord(i: u32, d: u32) -> f32 {
    return (f32(i) + op_f(4u)) / op_f(d) - op_f(4u);
}

// src0 at a possibly out-of-range (x, y), clamped to the edges.
fn at(x: i32, y: i32, j2: u32, j3: u32) -> f32 {
    let cx = u32(clamp(x, 0, i32(t_ne(0u, 0u)) - 1));
    let cy = u32(clamp(y, 0, i32(t_ne(0u, 1u)) - 1));
    return load_src0(t_idx(0u, vec4<u32>(cx, cy, j2, j3)));
}

// Bicubic convolution with a = -0.75 of four samples at fraction t past the second.
fn bicubic(p: vec4<f32>, t: f32) -> f32 {
    let a = -0.75;
    let t0 = t + 1.0;
    let t1 = t;
    let t2 = 1.0 - t;
    let t3 = 2.0 - t;
    let w0 = ((a * t0 - 5.0 * a) * t0 + 8.0 * a) * t0 - 4.0 * a;
    let w1 = ((a + 2.0) * t1 - (a + 3.0)) * t1 * t1 + 1.0;
    let w2 = ((a + 2.0) * t2 - (a + 3.0)) * t2 * t2 + 1.0;
    let w3 = ((a * t3 - 5.0 * a) * t3 + 8.0 * a) * t3 - 4.0 * a;
    return p.x * w0 + p.y * w1 + p.z * w2 + p.w * w3;
}

@compute @workgroup_size({{WG}})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let f = linear_id(wid, nwg, lid);
    if (f >= n_items()) {
        return;
    }
    let o = t_unflat(1u, f);
    let j2 = nearest(o.z, 2u);
    let j3 = nearest(o.w, 3u);
#if NEAREST
    let v = load_src0(t_idx(0u, vec4<u32>(nearest(o.x, 0u), nearest(o.y, 1u), j2, j3)));
#endif
#if BILINEAR
    let x = src_coord(o.x, 0u);
    let y = src_coord(o.y, 1u);
    let x0 = clamp(i32(floor(x)), 0, i32(t_ne(0u, 0u)) - 1);
    let y0 = clamp(i32(floor(y)), 0, i32(t_ne(0u, 1u)) - 1);
    let x1 = clamp(i32(floor(x)) + 1, 0, i32(t_ne(0u, 0u)) - 1);
    let y1 = clamp(i32(floor(y)) + 1, 0, i32(t_ne(0u, 1u)) - 1);
    let dx = clamp(x - f32(x0), 0.0, 1.0);
    let dy = clamp(y - f32(y0), 0.0, 1.0);
    let v = at(x0, y0, j2, j3) * (1.0 - dx) * (1.0 - dy) + at(x1, y0, j2, j3) * dx * (1.0 - dy)
        + at(x0, y1, j2, j3) * (1.0 - dx) * dy + at(x1, y1, j2, j3) * dx * dy;
#endif
#if BICUBIC
    let x = src_coord(o.x, 0u);
    let y = src_coord(o.y, 1u);
    let x0 = i32(floor(x));
    let y0 = i32(floor(y));
    let dx = x - f32(x0);
    let dy = y - f32(y0);
    var rows: vec4<f32>;
    for (var r = 0; r < 4; r++) {
        let yy = y0 + r - 1;
        let p = vec4<f32>(at(x0 - 1, yy, j2, j3), at(x0, yy, j2, j3), at(x0 + 1, yy, j2, j3),
                          at(x0 + 2, yy, j2, j3));
        rows[r] = bicubic(p, dx);
    }
    let v = bicubic(rows, dy);
#endif
    store_dst(t_idx(1u, o), v);
}
