//! The create→Ready latency distribution as an SVG chart: one CDF line per contender, on a
//! logarithmic time axis because contenders differ by orders of magnitude. Written by hand so it
//! needs no fonts and no plotting dependency.

use std::fmt::Write as _;

const WIDTH: f64 = 760.0;
const HEIGHT: f64 = 440.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 170.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 60.0;
const COLORS: [&str; 6] = [
    "#d62728", "#1f77b4", "#2ca02c", "#7f7f7f", "#9467bd", "#ff7f0e",
];

/// One line: a contender's latencies in milliseconds.
pub struct Series {
    pub name: String,
    pub latencies_ms: Vec<f64>,
}

pub fn cdf_svg(title: &str, series: &[Series]) -> String {
    let all = series.iter().flat_map(|s| s.latencies_ms.iter().copied());
    // The axis spans whole decades around the data; latencies under 1 ms are drawn at 1 ms.
    let max = all.fold(1.0_f64, f64::max);
    let (lo, hi) = (0.0_f64, max.log10().ceil().max(1.0));
    let x = |ms: f64| LEFT + (ms.max(1.0).log10() - lo) / (hi - lo) * (WIDTH - LEFT - RIGHT);
    let y = |frac: f64| HEIGHT - BOTTOM - frac * (HEIGHT - TOP - BOTTOM);

    let mut svg = open(WIDTH, HEIGHT, (LEFT + WIDTH - RIGHT) / 2.0, title);
    axes(&mut svg, lo as i32, hi as i32, &x, &y);
    for (i, s) in series.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        line(&mut svg, s, color, &x, &y);
        let ly = TOP + 20.0 + i as f64 * 20.0;
        let lx = WIDTH - RIGHT + 15.0;
        let _ = writeln!(
            svg,
            r#"<line x1="{lx}" y1="{ly}" x2="{}" y2="{ly}" stroke="{color}" stroke-width="2"/><text x="{}" y="{}">{} (n={})</text>"#,
            lx + 20.0,
            lx + 26.0,
            ly + 4.0,
            escape(&s.name),
            s.latencies_ms.len()
        );
    }
    svg.push_str("</svg>\n");
    svg
}

/// The start of an SVG document: white background, the title centred on `title_x`.
pub fn open(width: f64, height: f64, title_x: f64, title: &str) -> String {
    let mut svg = String::new();
    let _ = writeln!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(svg, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        svg,
        r#"<text x="{title_x}" y="22" text-anchor="middle" font-size="14">{}</text>"#,
        escape(title)
    );
    svg
}

/// Decade ticks on x, tenths on y, with grid lines and axis titles.
fn axes(svg: &mut String, lo: i32, hi: i32, x: &impl Fn(f64) -> f64, y: &impl Fn(f64) -> f64) {
    let (x0, x1, y0, y1) = (x(10f64.powi(lo)), x(10f64.powi(hi)), y(0.0), y(1.0));
    for d in lo..=hi {
        let ms = 10f64.powi(d);
        let px = x(ms);
        let label = if ms >= 1000.0 {
            format!("{} s", ms / 1000.0)
        } else {
            format!("{ms} ms")
        };
        let _ = writeln!(
            svg,
            r##"<line x1="{px}" y1="{y1}" x2="{px}" y2="{y0}" stroke="#ddd"/><text x="{px}" y="{}" text-anchor="middle">{label}</text>"##,
            y0 + 18.0
        );
    }
    for t in 0..=10 {
        let frac = f64::from(t) / 10.0;
        let py = y(frac);
        let _ = writeln!(
            svg,
            r##"<line x1="{x0}" y1="{py}" x2="{x1}" y2="{py}" stroke="#eee"/><text x="{}" y="{}" text-anchor="end">{:.0}%</text>"##,
            x0 - 6.0,
            py + 4.0,
            frac * 100.0
        );
    }
    let _ = writeln!(
        svg,
        r#"<rect x="{x0}" y="{y1}" width="{}" height="{}" fill="none" stroke="black"/>"#,
        x1 - x0,
        y0 - y1
    );
    let _ = writeln!(
        svg,
        r#"<text x="{}" y="{}" text-anchor="middle">create call returned → watch saw Ready (log scale)</text>"#,
        (x0 + x1) / 2.0,
        y0 + 42.0
    );
    let _ = writeln!(
        svg,
        r#"<text transform="translate(18 {}) rotate(-90)" text-anchor="middle">Caches Ready</text>"#,
        (y0 + y1) / 2.0
    );
}

/// The empirical CDF as a step line.
fn line(
    svg: &mut String,
    s: &Series,
    color: &str,
    x: &impl Fn(f64) -> f64,
    y: &impl Fn(f64) -> f64,
) {
    let mut v = s.latencies_ms.clone();
    v.sort_by(f64::total_cmp);
    if v.is_empty() {
        return;
    }
    let n = v.len() as f64;
    let mut points = format!("{:.1},{:.1}", x(v[0]), y(0.0));
    for (i, ms) in v.iter().enumerate() {
        let px = x(*ms);
        let _ = write!(
            points,
            " {px:.1},{:.1} {px:.1},{:.1}",
            y(i as f64 / n),
            y((i + 1) as f64 / n)
        );
    }
    let _ = writeln!(
        svg,
        r#"<polyline points="{points}" fill="none" stroke="{color}" stroke-width="2"/>"#
    );
}

pub fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_chart_is_one_svg_with_a_line_per_contender() {
        let series = vec![
            Series {
                name: "khai".into(),
                latencies_ms: vec![5.0, 10.0, 200.0],
            },
            Series {
                name: "Kopf".into(),
                latencies_ms: vec![500.0, 2500.0],
            },
        ];
        let svg = cdf_svg("N = 3 & more", &series);
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>\n"));
        assert_eq!(svg.matches("<polyline").count(), 2);
        assert!(svg.contains("N = 3 &amp; more"));
        assert!(svg.contains("10 s"));
    }
}
