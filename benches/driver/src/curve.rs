//! The cost curve (`scripts/bench --curve`): how each contender's cost grows with N. Per
//! contender and N (median over the runs that succeeded): CPU per object, peak RSS, the RSS per
//! 1,000 objects above the process's idle figure, the lag after the last create and the writes;
//! as a markdown table and as one SVG of three log-log panels (CPU per object, peak RSS, lag).

use crate::chart::{self, escape};
use crate::cli::Contender;
use crate::report::{cell, median};
use crate::run::{Outcome, RunResult};
use crate::writes;
use serde::Serialize;
use std::fmt::Write as _;

/// One contender at one N.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Point {
    pub contender: Contender,
    pub n: usize,
    /// Runs the medians are taken over.
    pub runs: usize,
    /// CPU over create, idle, update and delete (restart excluded) ÷ N, milliseconds.
    pub cpu_per_object_ms: Option<f64>,
    pub peak_rss_mib: Option<f64>,
    /// The operator's RSS after the warm-up, before the first create: the process with no objects.
    pub idle_rss_mib: Option<f64>,
    /// (peak RSS − idle RSS) ÷ N × 1,000.
    pub rss_per_1000_mib: Option<f64>,
    pub lag_s: f64,
    pub writes_per_create: f64,
    pub writes_per_update: f64,
    pub idle_writes: f64,
    pub restart_writes: Option<f64>,
}

/// Every contender's point at every N where at least one run succeeded, in the order given.
pub fn points(runs: &[Outcome], contenders: &[Contender], counts: &[usize]) -> Vec<Point> {
    let mut out = Vec::new();
    for &c in contenders {
        for &n in counts {
            let done: Vec<&RunResult> = runs
                .iter()
                .filter_map(|o| match o {
                    Outcome::Done(r) if r.contender == c && r.n == n => Some(r.as_ref()),
                    _ => None,
                })
                .collect();
            if done.is_empty() {
                continue;
            }
            let m = |f: &dyn Fn(&RunResult) -> Option<f64>| {
                median(done.iter().filter_map(|r| f(r)).collect())
            };
            let per = |w: &writes::Writes| writes::total(w) as f64 / n as f64;
            out.push(Point {
                contender: c,
                n,
                runs: done.len(),
                cpu_per_object_ms: m(&|r| {
                    (r.contender != Contender::Floor).then_some(())?;
                    let cpu = r.create.cpu_s + r.idle.cpu_s + r.update.cpu_s + r.delete.cpu_s;
                    Some(cpu / n as f64 * 1000.0)
                }),
                peak_rss_mib: m(&|r| r.peak_rss_mib),
                idle_rss_mib: m(&|r| r.idle_rss_mib),
                rss_per_1000_mib: m(&|r| {
                    Some((r.peak_rss_mib? - r.idle_rss_mib?) / n as f64 * 1000.0)
                }),
                lag_s: m(&|r| Some(r.create_lag_s)).unwrap_or_default(),
                writes_per_create: m(&|r| Some(per(&r.create.writes))).unwrap_or_default(),
                writes_per_update: m(&|r| Some(per(&r.update.writes))).unwrap_or_default(),
                idle_writes: m(&|r| Some(writes::total(&r.idle.writes) as f64)).unwrap_or_default(),
                restart_writes: m(
                    &|r| Some(writes::total(&r.restart.as_ref()?.cost.writes) as f64),
                ),
            });
        }
    }
    out
}

/// The curve table, one row per contender and N.
pub fn markdown(points: &[Point]) -> String {
    let mut md = String::from(
        "\n### Cost curve\n\n\
         | contender | N | runs | CPU/object (ms) | peak RSS (MiB) | idle RSS (MiB) | RSS/1,000 objects above idle (MiB) | lag after last create (s) | writes/Cache create | writes/Cache update | idle writes | restart writes |\n\
         |---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for p in points {
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {} | {} | {} | {:.2} | {:.2} | {:.2} | {:.0} | {} |",
            p.contender.name(),
            p.n,
            p.runs,
            cell(p.cpu_per_object_ms, 3),
            cell(p.peak_rss_mib, 1),
            cell(p.idle_rss_mib, 1),
            cell(p.rss_per_1000_mib, 2),
            p.lag_s,
            p.writes_per_create,
            p.writes_per_update,
            p.idle_writes,
            cell(p.restart_writes, 0),
        );
    }
    md
}

const PANEL_W: f64 = 300.0;
const PANEL_H: f64 = 260.0;
const LEFT: f64 = 60.0;
const GAP: f64 = 70.0;
const TOP: f64 = 50.0;
const BOTTOM: f64 = 50.0;
const LEGEND: f64 = 160.0;
const COLORS: [(Contender, &str); 5] = [
    (Contender::Khai, "#d62728"),
    (Contender::KhaiBase, "#ff9896"),
    (Contender::KubeRs, "#1f77b4"),
    (Contender::ControllerRuntime, "#2ca02c"),
    (Contender::Kopf, "#9467bd"),
];

fn color(c: Contender) -> &'static str {
    COLORS
        .iter()
        .find(|(k, _)| *k == c)
        .map_or("#7f7f7f", |(_, v)| v)
}

/// Three log-log panels, cost against N: CPU per object, peak RSS, lag after the last create.
pub fn svg(title: &str, points: &[Point]) -> String {
    type Get = fn(&Point) -> Option<f64>;
    let panels: [(&str, Get); 3] = [
        ("CPU per object (ms)", |p| p.cpu_per_object_ms),
        ("peak RSS (MiB)", |p| p.peak_rss_mib),
        ("lag after last create (s)", |p| Some(p.lag_s)),
    ];
    let width = LEFT + 3.0 * PANEL_W + 2.0 * GAP + LEGEND;
    let height = TOP + PANEL_H + BOTTOM;
    let mut svg = chart::open(width, height, (width - LEGEND) / 2.0, title);
    let ns: Vec<f64> = points.iter().map(|p| p.n as f64).collect();
    let (nlo, nhi) = decades(&ns);
    let mut contenders: Vec<Contender> = Vec::new();
    for p in points {
        if !contenders.contains(&p.contender) {
            contenders.push(p.contender);
        }
    }
    for (i, (label, get)) in panels.iter().enumerate() {
        let x0 = LEFT + i as f64 * (PANEL_W + GAP);
        let values: Vec<f64> = points.iter().filter_map(get).filter(|v| *v > 0.0).collect();
        let (vlo, vhi) = decades(&values);
        let x = |n: f64| x0 + (n.log10() - nlo) / (nhi - nlo) * PANEL_W;
        let y =
            |v: f64| TOP + PANEL_H - (v.max(10f64.powf(vlo)).log10() - vlo) / (vhi - vlo) * PANEL_H;
        panel_axes(&mut svg, label, x0, (nlo, nhi), (vlo, vhi), &x, &y);
        for &c in &contenders {
            let pts: Vec<(f64, f64)> = points
                .iter()
                .filter(|p| p.contender == c)
                .filter_map(|p| Some((p.n as f64, get(p)?)))
                .filter(|(_, v)| *v > 0.0)
                .collect();
            let line: Vec<String> = pts
                .iter()
                .map(|(n, v)| format!("{:.1},{:.1}", x(*n), y(*v)))
                .collect();
            let col = color(c);
            let _ = writeln!(
                svg,
                r#"<polyline points="{}" fill="none" stroke="{col}" stroke-width="2"/>"#,
                line.join(" ")
            );
            for (n, v) in &pts {
                let _ = writeln!(
                    svg,
                    r#"<circle cx="{:.1}" cy="{:.1}" r="3" fill="{col}"/>"#,
                    x(*n),
                    y(*v)
                );
            }
        }
    }
    for (i, &c) in contenders.iter().enumerate() {
        let lx = width - LEGEND + 15.0;
        let ly = TOP + 10.0 + i as f64 * 20.0;
        let _ = writeln!(
            svg,
            r#"<line x1="{lx}" y1="{ly}" x2="{}" y2="{ly}" stroke="{}" stroke-width="2"/><text x="{}" y="{}">{}</text>"#,
            lx + 20.0,
            color(c),
            lx + 26.0,
            ly + 4.0,
            escape(c.name())
        );
    }
    svg.push_str("</svg>\n");
    svg
}

/// Whole decades (log10) around the values; one decade around 1 when there are none.
fn decades(values: &[f64]) -> (f64, f64) {
    let lo = values.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = values.iter().copied().fold(0.0_f64, f64::max);
    if !(lo.is_finite() && hi > 0.0) {
        return (0.0, 1.0);
    }
    let (lo, hi) = (lo.log10().floor(), hi.log10().ceil());
    (lo, if hi > lo { hi } else { lo + 1.0 })
}

fn panel_axes(
    svg: &mut String,
    label: &str,
    x0: f64,
    (nlo, nhi): (f64, f64),
    (vlo, vhi): (f64, f64),
    x: &impl Fn(f64) -> f64,
    y: &impl Fn(f64) -> f64,
) {
    let (y0, y1) = (TOP + PANEL_H, TOP);
    for d in (nlo as i32)..=(nhi as i32) {
        let px = x(10f64.powi(d));
        let _ = writeln!(
            svg,
            r##"<line x1="{px:.1}" y1="{y1}" x2="{px:.1}" y2="{y0}" stroke="#ddd"/><text x="{px:.1}" y="{}" text-anchor="middle">{}</text>"##,
            y0 + 16.0,
            thousands(10f64.powi(d))
        );
    }
    for d in (vlo as i32)..=(vhi as i32) {
        let v = 10f64.powi(d);
        let py = y(v);
        let _ = writeln!(
            svg,
            r##"<line x1="{x0}" y1="{py:.1}" x2="{}" y2="{py:.1}" stroke="#eee"/><text x="{}" y="{:.1}" text-anchor="end">{}</text>"##,
            x0 + PANEL_W,
            x0 - 5.0,
            py + 4.0,
            short(v)
        );
    }
    let _ = writeln!(
        svg,
        r#"<rect x="{x0}" y="{y1}" width="{PANEL_W}" height="{PANEL_H}" fill="none" stroke="black"/>"#
    );
    let _ = writeln!(
        svg,
        r#"<text x="{}" y="{}" text-anchor="middle">{}</text><text x="{}" y="{}" text-anchor="middle">N (Caches, log scale)</text>"#,
        x0 + PANEL_W / 2.0,
        y1 - 8.0,
        escape(label),
        x0 + PANEL_W / 2.0,
        y0 + 36.0
    );
}

fn thousands(n: f64) -> String {
    let n = n.round() as u64;
    let s = n.to_string();
    let mut out = String::new();
    for (i, ch) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(ch);
    }
    out
}

fn short(v: f64) -> String {
    if v >= 1.0 {
        thousands(v)
    } else {
        format!("{v}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(c: Contender, n: usize, cpu: f64) -> Point {
        Point {
            contender: c,
            n,
            runs: 1,
            cpu_per_object_ms: Some(cpu),
            peak_rss_mib: Some(10.0 + n as f64 / 100.0),
            idle_rss_mib: Some(10.0),
            rss_per_1000_mib: Some(10.0),
            lag_s: 0.1,
            writes_per_create: 2.0,
            writes_per_update: 2.0,
            idle_writes: 0.0,
            restart_writes: Some(0.0),
        }
    }

    #[test]
    fn the_curve_has_a_line_per_contender_in_each_panel() {
        let pts = vec![
            point(Contender::Khai, 100, 1.8),
            point(Contender::Khai, 1000, 1.7),
            point(Contender::ControllerRuntime, 100, 3.0),
            point(Contender::ControllerRuntime, 1000, 2.5),
        ];
        let svg = svg("cost & N", &pts);
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>\n"));
        assert_eq!(svg.matches("<polyline").count(), 6);
        assert!(svg.contains("cost &amp; N"));
        assert!(svg.contains(">1,000<"));
        let md = markdown(&pts);
        assert_eq!(md.lines().filter(|l| l.starts_with("| ")).count(), 5);
        assert!(md.contains("| controller-runtime | 1000 | 1 | 2.500 |"));
    }

    #[test]
    fn decades_span_the_values() {
        assert_eq!(decades(&[0.15, 42.0]), (-1.0, 2.0));
        assert_eq!(decades(&[]), (0.0, 1.0));
        assert_eq!(decades(&[10.0]), (1.0, 2.0));
    }
}
