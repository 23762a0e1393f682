// Part decoders, one per weight format: `part(row, u, p)` returns 8 of the 32 values of unit u
// (values 32u .. 32u + 31) of a weight row starting at `row` (a byte offset for block formats,
// an element offset for floats), as two vec4s; `xpair(p)` says which vec4s of the unit (0..7)
// they are. In the mat-vec four lanes decode one unit, so neighbouring lanes read neighbouring
// bytes: each load instruction of a subgroup covers a short contiguous span instead of a
// unit-sized stride per lane (the tiled and coop kernels read units the same way). The formats
// whose 32 values come from the low and the high nibbles of 16 bytes give part p the two
// nibbles of their bytes 4p .. 4p + 3 (one word); the rest give part p values 8p .. 8p + 7.
// Helpers (w2, funnel, bytes_i, kscale) are in `quant_unit.wgsl`.

// U_NIBBLES: q4_0, q4_1, q5_0, q5_1.
#if U_NIBBLES
fn xpair(p: u32) -> vec2<u32> {
    return vec2<u32>(p, p + 4u);
}
#else
fn xpair(p: u32) -> vec2<u32> {
    return vec2<u32>(2u * p, 2u * p + 1u);
}
#endif

// U_INTQ (the integer block formats: q4_0, q4_1, q5_0, q5_1, q8_0, q4_K, q5_K, q6_K):
// `partq(row, u, p)` gives the part's quants as two words of four signed bytes in the order of
// `part`'s two vec4s, and (d, m) with value = d · q + m; `part` is built from it, and the
// mat-vec's int8 path (Q8X) multiplies the quants directly with dot4I8Packed.
#if U_INTQ
struct PartQ {
    qa: u32,
    qb: u32,
    d: f32,
    m: f32,
}

const LOW4: u32 = 0x0f0f0f0fu;

// Bits s .. s + 3 of qh moved to bit 4 of bytes 0 .. 3.
fn hbits(qh: u32, s: u32) -> u32 {
    let h = qh >> s;
    return ((h & 1u) << 4u) | ((h & 2u) << 11u) | ((h & 4u) << 18u) | ((h & 8u) << 25u);
}

// The block of `size` bytes at unit u of a row at `row` when it is only 2-aligned and opens with
// its f16 scale (q4_0, q5_0, q8_0): its first word, whether it starts in that word's upper half
// (its later words are then `funnel`s of two), its first word's value, and the scale.
struct Head2 {
    a: u32,
    up: bool,
    r0: u32,
    d: f32,
}

fn head2(row: u32, u: u32, size: u32) -> Head2 {
    let blk = row + u * size;
    let a = blk >> 2u;
    let up = (blk & 2u) != 0u;
    let r0 = ldw(a);
    return Head2(a, up, r0, unpack2x16float(select(r0, r0 >> 16u, up)).x);
}

fn part(row: u32, u: u32, p: u32) -> array<vec4<f32>, 2> {
    let q = partq(row, u, p);
    return array<vec4<f32>, 2>(bytes_i(q.qa) * q.d + q.m, bytes_i(q.qb) * q.d + q.m);
}
#endif

#if JOB
// Jobs of the mat-vec's int8 path (Q8X) for q4_K, q5_K and q6_K: `jobq(row, j)` gives UPJ = 2 units
// of a row whose quants share their bytes (`job_unit(j, k)` says which), each as two vec4s of
// words of four quants in value order (unit k's values 16h .. 16h + 15 in w[2k + h]), and a
// scale d and offset m per half unit (value = d · q + m). One lane decodes both units from one
// load of their bytes instead of two lanes loading them each.
const UPJ: u32 = 2u;

struct JobQ {
    w: array<vec4<u32>, 4>,
    d: vec4<f32>,
    m: vec4<f32>,
}
#endif

#if U_KSCALES
// q4_K and q5_K open with { f16 d; f16 dmin; u8 scales[12]; }: unit u of a row at `row`
// (blocks of `size` bytes) is sub-block u % 8 of block u / 8, with values d · q - mn.
struct KHead {
    w0: u32,
    d: f32,
    mn: f32,
}

fn khead(row: u32, u: u32, size: u32) -> KHead {
    let w0 = (row + (u / 8u) * size) >> 2u;
    let dm = unpack2x16float(ldw(w0));
    let sm = kscale(ldw(w0 + 1u), ldw(w0 + 2u), ldw(w0 + 3u), u % 8u);
    return KHead(w0, dm.x * sm.x, dm.y * sm.y);
}

#if JOB
// q4_K's and q5_K's jobs: j is sub-blocks 2c and 2c + 1 (c = j % 4) of block j / 4.
fn job_unit(j: u32, k: u32) -> u32 {
    return 2u * j + k;
}

// The job of sub-blocks 2c and 2c + 1 from their block's head h (d, dmin, the 12 scale bytes),
// their 32 quant bytes qa, qb (low nibbles: 2c, high: 2c + 1) and the 32 qh bytes ha, hb whose
// bits 2c and 2c + 1 are the fifth bits of their values (zeros for q4_K).
fn kjob(h: vec4<u32>, c: u32, qa: vec4<u32>, qb: vec4<u32>, ha: vec4<u32>,
        hb: vec4<u32>) -> JobQ {
    let dm = unpack2x16float(h.x);
    let s0 = kscale(h.y, h.z, h.w, 2u * c) * dm;
    let s1 = kscale(h.y, h.z, h.w, 2u * c + 1u) * dm;
    let lo = vec4<u32>(LOW4);
    let four = vec4<u32>(4u);
    let one = vec4<u32>(0x01010101u);
    let b0 = vec4<u32>(2u * c);
    let b1 = vec4<u32>(2u * c + 1u);
    return JobQ(array<vec4<u32>, 4>(
        (qa & lo) | (((ha >> b0) & one) << four),
        (qb & lo) | (((hb >> b0) & one) << four),
        ((qa >> four) & lo) | (((ha >> b1) & one) << four),
        ((qb >> four) & lo) | (((hb >> b1) & one) << four)),
                vec4<f32>(s0.x, s0.x, s1.x, s1.x), -vec4<f32>(s0.y, s0.y, s1.y, s1.y));
}
#endif
#endif

#if U_Q4_0
// q4_0 { f16 d; u8 qs[16]; }: byte i holds value i (low nibble) and value i + 16 (high).
fn partq(row: u32, u: u32, p: u32) -> PartQ {
    let h = head2(row, u, 18u);
    let q = funnel(ldw(h.a + p), ldw(h.a + p + 1u), h.up);
    return PartQ(q & LOW4, (q >> 4u) & LOW4, h.d, -8.0 * h.d);
}
#endif

#if U_Q4_1
// q4_1 { f16 d; f16 m; u8 qs[16]; } (20 bytes: word-aligned).
fn partq(row: u32, u: u32, p: u32) -> PartQ {
    let w0 = (row + u * 20u) >> 2u;
    let dm = unpack2x16float(ldw(w0));
    let q = ldw(w0 + 1u + p);
    return PartQ(q & LOW4, (q >> 4u) & LOW4, dm.x, dm.y);
}
#endif

#if U_Q5_0
// q5_0 { f16 d; u8 qh[4]; u8 qs[16]; }: bit i of qh is the fifth bit of value i.
fn partq(row: u32, u: u32, p: u32) -> PartQ {
    let h = head2(row, u, 22u);
    let qh = funnel(h.r0, ldw(h.a + 1u), h.up);
    let q = funnel(ldw(h.a + 1u + p), ldw(h.a + 2u + p), h.up);
    return PartQ((q & LOW4) | hbits(qh, 4u * p), ((q >> 4u) & LOW4) | hbits(qh, 16u + 4u * p),
                 h.d, -16.0 * h.d);
}
#endif

#if U_Q5_1
// q5_1 { f16 d; f16 m; u8 qh[4]; u8 qs[16]; } (24 bytes: word-aligned).
fn partq(row: u32, u: u32, p: u32) -> PartQ {
    let w0 = (row + u * 24u) >> 2u;
    let dm = unpack2x16float(ldw(w0));
    let qh = ldw(w0 + 1u);
    let q = ldw(w0 + 2u + p);
    return PartQ((q & LOW4) | hbits(qh, 4u * p), ((q >> 4u) & LOW4) | hbits(qh, 16u + 4u * p),
                 dm.x, dm.y);
}
#endif

#if U_Q8_0
// q8_0 { f16 d; i8 qs[32]; }
fn partq(row: u32, u: u32, p: u32) -> PartQ {
    let h = head2(row, u, 34u);
    let w0 = ldw(h.a + 2u * p);
    let w1 = ldw(h.a + 2u * p + 1u);
    let w2 = ldw(h.a + 2u * p + 2u);
    return PartQ(funnel(w0, w1, h.up), funnel(w1, w2, h.up), h.d, 0.0);
}
#endif

#if U_Q4_K
// q4_K { head; u8 qs[128]; }: sub-block s = 2c + hi holds the `hi` nibbles of bytes
// 32c .. 32c + 31 of qs.
fn partq(row: u32, u: u32, p: u32) -> PartQ {
    let s = u % 8u;
    let h = khead(row, u, 144u);
    let q = h.w0 + 4u + 8u * (s / 2u) + 2u * p;
    let sh = 4u * (s % 2u);
    return PartQ((ldw(q) >> sh) & LOW4, (ldw(q + 1u) >> sh) & LOW4, h.d, -h.mn);
}

#if JOB
// Job j: sub-blocks 2c and 2c + 1 (c = j % 4) of block j / 4, the low and the high nibbles of
// the same 32 quant bytes. The block's head (d, dmin, the 12 scale bytes) and those bytes are
// words 0..3 and 4 + 8c .. 11 + 8c of a block of 36: three 16-byte loads with WV4.
fn jobq(row: u32, j: u32) -> JobQ {
    let c = j % 4u;
    let w0 = (row + (j / 4u) * 144u) >> 2u;
    let none = vec4<u32>(0u);
    return kjob(ld4(w0), c, ld4(w0 + 4u + 8u * c), ld4(w0 + 8u + 8u * c), none, none);
}
#endif
#endif

#if U_Q6_K
// q6_K { u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d; } (210 bytes: 2-aligned). Sub-block
// s = 4n + quarter: low nibbles from ql[64n + 32 (quarter & 1) + l] at bit 4 (quarter >> 1),
// high bits from qh[32n + l] at bit 2 quarter; scales[8n + 2 quarter + l / 16].
fn partq(row: u32, u: u32, p: u32) -> PartQ {
    let s = u % 8u;
    let blk = row + (u / 8u) * 210u;
    let n = s / 4u;
    let quarter = s % 4u;
    let d = unpack2x16float(w2(blk + 208u)).x;
    let sc = bytes_i(w2(blk + 192u + 8u * n + 2u * quarter));
    let ql = blk + 64u * n + 32u * (quarter & 1u) + 8u * p;
    let qh = blk + 128u + 32u * n + 8u * p;
    let shl = 4u * (quarter >> 1u);
    let shh = 2u * quarter;
    let f = d * select(sc.x, sc.y, p >= 2u);
    let qa = ((w2(ql) >> shl) & LOW4) | (((w2(qh) >> shh) & 0x03030303u) << 4u);
    let qb = ((w2(ql + 4u) >> shl) & LOW4) | (((w2(qh + 4u) >> shh) & 0x03030303u) << 4u);
    return PartQ(qa, qb, f, -32.0 * f);
}

#if JOB
// Job j: quarters q and q + 2 (q = j % 2) of half n = j / 2 % 2 of block j / 4, which share
// their 32 ql bytes (low and high nibbles) and their 32 qh bytes (bits 2q and 2q + 4).
fn job_unit(j: u32, k: u32) -> u32 {
    return 8u * (j / 4u) + 4u * (j / 2u % 2u) + j % 2u + 2u * k;
}

// The 8 words from byte b on, for a 2-aligned b: 9 word loads, funnelled when b is not
// 4-aligned (blocks of 210 bytes alternate).
fn ld8(b: u32) -> array<vec4<u32>, 2> {
    let i = b >> 2u;
    let a = ld4(i);
    let c = ld4(i + 4u);
    let e = ldw(i + 8u);
    let up = (b & 2u) != 0u;
    let sh = vec4<u32>(16u);
    let fa = (a >> sh) | (vec4<u32>(a.yzw, c.x) << sh);
    let fc = (c >> sh) | (vec4<u32>(c.yzw, e) << sh);
    return array<vec4<u32>, 2>(select(a, fa, up), select(c, fc, up));
}

fn jobq(row: u32, j: u32) -> JobQ {
    let blk = row + (j / 4u) * 210u;
    let n = j / 2u % 2u;
    let q = j % 2u;
    let ql = ld8(blk + 64u * n + 32u * q);
    let qh = ld8(blk + 128u + 32u * n);
    // The half's 8 scales: unit q takes 2q and 2q + 1, unit q + 2 takes 2q + 4 and 2q + 5.
    let sa = bytes_i(w2(blk + 192u + 8u * n));
    let sb = bytes_i(w2(blk + 196u + 8u * n));
    let d = unpack2x16float(w2(blk + 208u)).x;
    let f = d * vec4<f32>(select(sa.xy, sa.zw, q == 1u), select(sb.xy, sb.zw, q == 1u));
    let lo = vec4<u32>(LOW4);
    let two = vec4<u32>(0x03030303u);
    let s0 = vec4<u32>(2u * q);
    let s1 = vec4<u32>(2u * q + 4u);
    let four = vec4<u32>(4u);
    return JobQ(array<vec4<u32>, 4>(
        (ql[0] & lo) | (((qh[0] >> s0) & two) << four),
        (ql[1] & lo) | (((qh[1] >> s0) & two) << four),
        ((ql[0] >> four) & lo) | (((qh[0] >> s1) & two) << four),
        ((ql[1] >> four) & lo) | (((qh[1] >> s1) & two) << four)), f, -32.0 * f);
}
#endif
#endif

#if U_Q5_K
// q5_K { head; u8 qh[32]; u8 qs[128]; }: sub-block s holds the nibbles q4_K's would (bytes
// 32 (s / 2) .. 32 (s / 2) + 31 of qs) and bit s of qh[l] is the fifth bit of its value l.
fn partq(row: u32, u: u32, p: u32) -> PartQ {
    let s = u % 8u;
    let h = khead(row, u, 176u);
    let q = h.w0 + 12u + 8u * (s / 2u) + 2u * p;
    let qh = h.w0 + 4u + 2u * p;
    let sh = 4u * (s % 2u);
    return PartQ(((ldw(q) >> sh) & LOW4) | (((ldw(qh) >> s) & 0x01010101u) << 4u),
                 ((ldw(q + 1u) >> sh) & LOW4) | (((ldw(qh + 1u) >> s) & 0x01010101u) << 4u),
                 h.d, -h.mn);
}

#if JOB
// Job j: sub-blocks 2c and 2c + 1 (c = j % 4) of block j / 4, as q4_K's, with bits 2c and
// 2c + 1 of the 32 qh bytes: the head, qh and the quant bytes are five 16-byte loads with WV4
// (blocks of 176 bytes = 11 of 16).
fn jobq(row: u32, j: u32) -> JobQ {
    let c = j % 4u;
    let w0 = (row + (j / 4u) * 176u) >> 2u;
    return kjob(ld4(w0), c, ld4(w0 + 12u + 8u * c), ld4(w0 + 16u + 8u * c), ld4(w0 + 4u),
                ld4(w0 + 8u));
}
#endif
#endif

#if U_GENERIC
// Any other block format, one `dq` call per value. A loop, not eight inlined `dq` calls:
// inlined, iq1_s's grid lookups made a kernel that lost the device of Chromium's SwiftShader.
fn part(row: u32, u: u32, p: u32) -> array<vec4<f32>, 2> {
    let blk = row + (u / {{SUBS}}u) * {{TYPE_SIZE}}u;
    let i = (u % {{SUBS}}u) * 32u + 8u * p;
    var v: array<vec4<f32>, 2>;
    for (var h = 0u; h < 2u; h++) {
        let j = i + 4u * h;
        v[h] = vec4<f32>(dq(blk, j), dq(blk, j + 1u), dq(blk, j + 2u), dq(blk, j + 3u));
    }
    return v;
}
#endif

#if U_F16
// f16 weights bound as raw words: value i of the row is half (i & 1) of word i / 2.
fn part(row: u32, u: u32, p: u32) -> array<vec4<f32>, 2> {
    let w = ((row + 32u * u) >> 1u) + 4u * p;
    return array<vec4<f32>, 2>(vec4<f32>(unpack2x16float(ldw(w)), unpack2x16float(ldw(w + 1u))),
                               vec4<f32>(unpack2x16float(ldw(w + 2u)), unpack2x16float(ldw(w + 3u))));
}
#endif

#if U_BF16
// bf16 weights, two per word (the low half first).
fn bf2(a: u32, b: u32) -> vec4<f32> {
    return bitcast<vec4<f32>>(vec4<u32>(a << 16u, a & 0xffff0000u, b << 16u, b & 0xffff0000u));
}

fn part(row: u32, u: u32, p: u32) -> array<vec4<f32>, 2> {
    let w = ((row + 32u * u) >> 1u) + 4u * p;
    return array<vec4<f32>, 2>(bf2(ldw(w), ldw(w + 1u)), bf2(ldw(w + 2u), ldw(w + 3u)));
}
#endif

#if U_F32
fn part(row: u32, u: u32, p: u32) -> array<vec4<f32>, 2> {
    let i = row + 32u * u + 8u * p;
    return array<vec4<f32>, 2>(
        bitcast<vec4<f32>>(vec4<u32>(ldw(i), ldw(i + 1u), ldw(i + 2u), ldw(i + 3u))),
        bitcast<vec4<f32>>(vec4<u32>(ldw(i + 4u), ldw(i + 5u), ldw(i + 6u), ldw(i + 7u))));
}
#endif
