//! `bench-chart`: draws the timelines `scripts/bench` leaves in its results
//! directory into one PNG (issue 8: throughput and lag over time; issue 17:
//! the lag added against the offered load, and memory on a 100-partition backlog).
//!
//! Longer than 800 lines: it is one drawing tool, read top to bottom (parse
//! the timelines, then lay out and draw each panel), and bench tooling that
//! the daemon never links.
//!
//! ```text
//! bench-chart --results DIR --out FILE.png [--record-size B] [--lag-run NAME] [--font TTF] [--title TEXT]
//! ```
//!
//! Reads, from DIR (each one optional; a missing one is noted on stderr):
//!
//! - `mm2.timeline`, `kmirror.timeline`, `mm2_small.timeline`,
//!   `kmirror_small.timeline`: `BenchProbe watch` samples of the copy runs,
//!   `wall_ms end_offset_sum cpu_ticks rss_kb hwm_kb` (-1 = not known), and
//!   beside each `PREFIX.start_ms`, the wall clock (ms) when the mirror was
//!   started, when the destination held none of the records: the x-axis starts
//!   there (the probe's first sample comes a JVM start later), or at the first
//!   sample without it;
//! - `mm2_NAME.lag.timeline`, `kmirror_NAME.lag.timeline` (NAME from
//!   `--lag-run`, default `lag`; `scripts/bench` passes the curve level the
//!   goals name, e.g. `curve_10000`): `BenchProbe lag` per-second figures,
//!   `side second count p50 p99 max` (ms);
//! - `curve.tsv`: one line per mirror and offered load of the lag curve,
//!   `mirror offered achieved source_p50 source_p99 p99 added_p50 added_p99`
//!   (mirror `mm2` or `kmirror`, records/s and ms, `n/a` where not measured,
//!   `#` comments);
//! - `mm2_backlog100.timeline`, `kmirror_backlog100.timeline` (and their
//!   `.start_ms`): the copy of the 100-partition backlog, like the copy runs.
//!
//! and draws six panels: (a) copy throughput, (b) small-batch throughput,
//! (c) lag per second of one lag run's window, (d) RSS of the mirror during the
//! copies, (e) the lag added against the offered load, (f) RSS of the mirror
//! while it copies the 100-partition backlog.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{anyhow, bail, Context, Result};
use plotters::coord::combinators::{LogCoord, WithKeyPoints};
use plotters::coord::ranged1d::{AsRangedCoord, Ranged, ValueFormatter};
use plotters::coord::Shift;
use plotters::element::DashedPathElement;
use plotters::prelude::*;
use plotters::style::FontStyle;

const DEFAULT_FONT: &str = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf";
const FONT: &str = "sans-serif";
const MM2: RGBColor = RGBColor(214, 39, 40);
const KMIRROR: RGBColor = RGBColor(31, 119, 180);
const MM2_SOURCE: RGBColor = RGBColor(240, 160, 150);
const KMIRROR_SOURCE: RGBColor = RGBColor(140, 190, 230);

/// One `BenchProbe watch` sample; -1 where the probe did not know the value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Sample {
    wall_ms: i64,
    end_offset_sum: i64,
    cpu_ticks: i64,
    rss_kb: i64,
    hwm_kb: i64,
}

/// The non-blank lines of a timeline, trimmed, with their 1-based numbers.
fn data_lines(text: &str) -> impl Iterator<Item = (usize, &str)> {
    text.lines()
        .enumerate()
        .map(|(i, l)| (i + 1, l.trim()))
        .filter(|(_, l)| !l.is_empty())
}

/// Parses a `watch` timeline: five integers a line, blank lines ignored.
fn parse_watch(text: &str, file: &str) -> Result<Vec<Sample>> {
    let mut out = Vec::new();
    for (n, line) in data_lines(text) {
        let f = line
            .split_whitespace()
            .map(str::parse::<i64>)
            .collect::<Result<Vec<_>, _>>()
            .ok()
            .filter(|f| f.len() == 5)
            .ok_or_else(|| {
                anyhow!(
                    "{file}:{}: expected 5 integers `wall_ms end_offset_sum cpu_ticks rss_kb hwm_kb`, got `{line}`",
                    n
                )
            })?;
        if let Some(prev) = out.last().map(|s: &Sample| s.wall_ms) {
            if f[0] < prev {
                bail!(
                    "{file}:{}: wall_ms {} is before the previous sample's {prev}",
                    n,
                    f[0]
                );
            }
        }
        out.push(Sample {
            wall_ms: f[0],
            end_offset_sum: f[1],
            cpu_ticks: f[2],
            rss_kb: f[3],
            hwm_kb: f[4],
        });
    }
    Ok(out)
}

/// Parses a `PREFIX.start_ms` file: one integer.
fn parse_start_ms(text: &str, file: &str) -> Result<i64> {
    text.trim().parse().map_err(|_| {
        anyhow!(
            "{file}:1: expected the mirror's start time in ms, got `{}`",
            text.trim()
        )
    })
}

/// Puts the mirror's start in front of the samples as a sample with an end-offset
/// sum of 0 (the destination was empty then) and nothing else known.
fn with_start(mut samples: Vec<Sample>, start_ms: Option<i64>) -> Vec<Sample> {
    if let (Some(start), Some(first)) = (start_ms, samples.first()) {
        if start <= first.wall_ms {
            samples.insert(
                0,
                Sample {
                    wall_ms: start,
                    end_offset_sum: 0,
                    cpu_ticks: -1,
                    rss_kb: -1,
                    hwm_kb: -1,
                },
            );
        }
    }
    samples
}

/// Copy throughput between successive samples whose end-offset sum is known,
/// as a step line: for each interval, (start, rate) and (end, rate), in seconds
/// since the first sample and MiB of record values per second. A sum that went
/// down counts as 0.
fn throughput(samples: &[Sample], record_size: u64) -> Vec<(f64, f64)> {
    let Some(t0) = samples.first().map(|s| s.wall_ms) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let mut prev: Option<&Sample> = None;
    for s in samples.iter().filter(|s| s.end_offset_sum >= 0) {
        if let Some(p) = prev {
            let dt = (s.wall_ms - p.wall_ms) as f64 / 1000.0;
            if dt <= 0.0 {
                continue;
            }
            let records = (s.end_offset_sum - p.end_offset_sum).max(0) as f64;
            let rate = records * record_size as f64 / 1_048_576.0 / dt;
            out.push(((p.wall_ms - t0) as f64 / 1000.0, rate));
            out.push(((s.wall_ms - t0) as f64 / 1000.0, rate));
        }
        prev = Some(s);
    }
    out
}

/// RSS in MiB over seconds since the first sample, where the process was there.
fn rss_mib(samples: &[Sample]) -> Vec<(f64, f64)> {
    let Some(t0) = samples.first().map(|s| s.wall_ms) else {
        return Vec::new();
    };
    samples
        .iter()
        .filter(|s| s.rss_kb > 0)
        .map(|s| ((s.wall_ms - t0) as f64 / 1000.0, s.rss_kb as f64 / 1024.0))
        .collect()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LagSide {
    Source,
    Destination,
}

/// One line of a `lag` timeline: the records of one second of the window on one side.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct LagSecond {
    side: LagSide,
    second: u32,
    count: u64,
    p50: i64,
    p99: i64,
    max: i64,
}

/// Parses a `lag` timeline: `side second count p50 p99 max`, blank lines ignored.
fn parse_lag(text: &str, file: &str) -> Result<Vec<LagSecond>> {
    let mut out = Vec::new();
    for (n, line) in data_lines(text) {
        let bad = || {
            anyhow!(
                "{file}:{}: expected `side second count p50 p99 max` (side source or destination, then integers), got `{line}`",
                n
            )
        };
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() != 6 {
            return Err(bad());
        }
        let side = match f[0] {
            "source" => LagSide::Source,
            "destination" => LagSide::Destination,
            _ => return Err(bad()),
        };
        let num = |s: &str| s.parse::<i64>().map_err(|_| bad());
        out.push(LagSecond {
            side,
            second: f[1].parse().map_err(|_| bad())?,
            count: f[2].parse().map_err(|_| bad())?,
            p50: num(f[3])?,
            p99: num(f[4])?,
            max: num(f[5])?,
        });
    }
    Ok(out)
}

/// One mirror's lag lines: destination p99 and p50, and its run's source-only p99.
fn lag_lines(
    name: &str,
    rows: Option<&[LagSecond]>,
    color: RGBColor,
    source: RGBColor,
) -> Vec<Line> {
    let rows = rows.unwrap_or_default();
    vec![
        Line::new(
            format!("{name} p99"),
            lag_series(rows, LagSide::Destination, |r| r.p99),
            color,
        ),
        Line::new(
            format!("{name} p50"),
            lag_series(rows, LagSide::Destination, |r| r.p50),
            color,
        )
        .dashed(),
        Line::new(
            format!("source only p99, {name} run"),
            lag_series(rows, LagSide::Source, |r| r.p99),
            source,
        )
        .width(1),
    ]
}

/// (second of the window, value in ms) for one side's seconds that had records.
fn lag_series(rows: &[LagSecond], side: LagSide, pick: fn(&LagSecond) -> i64) -> Vec<(f64, f64)> {
    let mut v: Vec<(f64, f64)> = rows
        .iter()
        .filter(|r| r.side == side && r.count > 0 && pick(r) >= 0)
        .map(|r| (r.second as f64, pick(r) as f64))
        .collect();
    v.sort_by(|a, b| a.0.total_cmp(&b.0));
    v
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mirror {
    Mm2,
    Kmirror,
}

/// One level of the lag curve for one mirror; None where the run had no figure.
#[derive(Debug, Clone, Copy, PartialEq)]
struct CurveLevel {
    mirror: Mirror,
    offered: f64,
    source_p99: Option<f64>,
    added_p50: Option<f64>,
    added_p99: Option<f64>,
}

/// Parses `curve.tsv`: `mirror offered achieved source_p50 source_p99 p99
/// added_p50 added_p99`, `n/a` for a figure not measured, `#` comments and
/// blank lines ignored.
fn parse_curve(text: &str, file: &str) -> Result<Vec<CurveLevel>> {
    let mut out = Vec::new();
    for (n, line) in data_lines(text).filter(|(_, l)| !l.starts_with('#')) {
        let bad = || {
            anyhow!(
                "{file}:{}: expected `mirror offered achieved source_p50 source_p99 p99 added_p50 added_p99` \
                 (mirror mm2 or kmirror, offered a positive number, the rest numbers or n/a), got `{line}`",
                n
            )
        };
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() != 8 {
            return Err(bad());
        }
        let mirror = match f[0] {
            "mm2" => Mirror::Mm2,
            "kmirror" => Mirror::Kmirror,
            _ => return Err(bad()),
        };
        let fig = |s: &str| -> Result<Option<f64>> {
            if s == "n/a" {
                return Ok(None);
            }
            s.parse::<f64>()
                .ok()
                .filter(|v| v.is_finite() && *v >= 0.0)
                .map(Some)
                .ok_or_else(bad)
        };
        let offered = fig(f[1])?.filter(|v| *v > 0.0).ok_or_else(bad)?;
        for s in &f[2..] {
            fig(s)?;
        }
        out.push(CurveLevel {
            mirror,
            offered,
            source_p99: fig(f[4])?,
            added_p50: fig(f[6])?,
            added_p99: fig(f[7])?,
        });
    }
    Ok(out)
}

/// (offered records/s, value in ms) of one mirror's levels that have the figure,
/// by offered load.
fn curve_series(
    rows: &[CurveLevel],
    mirror: Mirror,
    pick: fn(&CurveLevel) -> Option<f64>,
) -> Vec<(f64, f64)> {
    let mut v: Vec<(f64, f64)> = rows
        .iter()
        .filter(|r| r.mirror == mirror)
        .filter_map(|r| pick(r).map(|y| (r.offered, y)))
        .collect();
    v.sort_by(|a, b| a.0.total_cmp(&b.0));
    v
}

/// The curve panel's lines: each mirror's added p99 and p50, and the source-only
/// p99 of its runs.
fn curve_lines(rows: &[CurveLevel]) -> Vec<Line> {
    let mut out = Vec::new();
    for (mirror, name, color, source) in [
        (Mirror::Mm2, "MM2", MM2, MM2_SOURCE),
        (Mirror::Kmirror, "kmirror", KMIRROR, KMIRROR_SOURCE),
    ] {
        out.push(Line::new(
            format!("{name} added p99"),
            curve_series(rows, mirror, |r| r.added_p99),
            color,
        ));
        out.push(
            Line::new(
                format!("{name} added p50"),
                curve_series(rows, mirror, |r| r.added_p50),
                color,
            )
            .dashed(),
        );
        out.push(
            Line::new(
                format!("source only p99, {name} runs"),
                curve_series(rows, mirror, |r| r.source_p99),
                source,
            )
            .width(1),
        );
    }
    out
}

// ---------------------------------------------------------------- drawing

struct Line {
    label: String,
    points: Vec<(f64, f64)>,
    color: RGBColor,
    dashed: bool,
    width: u32,
}

impl Line {
    fn new(label: impl Into<String>, points: Vec<(f64, f64)>, color: RGBColor) -> Self {
        Line {
            label: label.into(),
            points,
            color,
            dashed: false,
            width: 2,
        }
    }
    fn dashed(mut self) -> Self {
        self.dashed = true;
        self
    }
    fn width(mut self, w: u32) -> Self {
        self.width = w;
        self
    }
}

struct Panel {
    caption: String,
    x_desc: String,
    y_desc: String,
    /// Logarithmic x (the offered load spans powers of two).
    log_x: bool,
    log_y: bool,
    /// A horizontal reference line (y, legend label).
    goal: Option<(f64, String)>,
    lines: Vec<Line>,
    /// Shown instead of a chart when no line has points.
    missing: String,
}

type Area<'a> = DrawingArea<BitMapBackend<'a>, Shift>;

/// Width of the legend column on the right of each panel, in pixels.
const LEGEND_WIDTH: u32 = 250;

fn draw_panel(area: &Area<'_>, p: &Panel) -> Result<()> {
    let lines: Vec<&Line> = p.lines.iter().filter(|l| !l.points.is_empty()).collect();
    if lines.is_empty() {
        let area = area.titled(&p.caption, (FONT, 22))?;
        let (_, h) = area.dim_in_pixel();
        area.draw(&Text::new(
            format!("no data ({})", p.missing),
            (80, h as i32 / 2),
            (FONT, 18).into_font().color(&RGBColor(110, 110, 110)),
        ))?;
        return Ok(());
    }
    let area = area.titled(&p.caption, (FONT, 22))?;
    let (w, _) = area.dim_in_pixel();
    let (plot, legend) = area.split_horizontally(w.saturating_sub(LEGEND_WIDTH));
    let pts = || lines.iter().flat_map(|l| l.points.iter());
    let x_max = pts().map(|p| p.0).fold(1.0f64, f64::max);
    let y_max = pts().map(|p| p.1).fold(0.0f64, f64::max);
    // A log axis cannot start at 0: it opens a little below the smallest x.
    let x_min_pos = pts()
        .map(|p| p.0)
        .filter(|x| *x > 0.0)
        .fold(x_max, f64::min);
    let (x0, x1) = if p.log_x {
        (x_min_pos / 1.3, x_max * 1.3)
    } else {
        (0.0, x_max)
    };
    let y_log = (1.0..y_max.max(p.goal.as_ref().map_or(1.0, |g| g.0)).max(10.0) * 1.5).log_scale();
    let y_lin = 0.0..(y_max * 1.08).max(1.0);
    let xs = (x0, x1);
    match (p.log_x, p.log_y) {
        (false, false) => draw_chart(&plot, p, &lines, x0..x1, y_lin, xs)?,
        (false, true) => draw_chart(&plot, p, &lines, x0..x1, y_log, xs)?,
        (true, false) => draw_chart(&plot, p, &lines, log_x_axis(x0, x1, &lines), y_lin, xs)?,
        (true, true) => draw_chart(&plot, p, &lines, log_x_axis(x0, x1, &lines), y_log, xs)?,
    }
    // The legend, beside the plot so that it never hides a line.
    let mut y = 24;
    let entry = |y: i32, label: &str, color: RGBColor, dashed: bool, width: u32| -> Result<()> {
        let s = color.stroke_width(width);
        let seg = vec![(4, y), (34, y)];
        if dashed {
            legend.draw(&DashedPathElement::new(seg, 6, 4, s))?;
        } else {
            legend.draw(&PathElement::new(seg, s))?;
        }
        legend.draw(&Text::new(label.to_string(), (42, y - 9), (FONT, 15)))?;
        Ok(())
    };
    for l in &lines {
        entry(y, &l.label, l.color, l.dashed, l.width)?;
        y += 24;
    }
    if let Some((_, label)) = &p.goal {
        entry(y, label, BLACK, true, 1)?;
    }
    Ok(())
}

/// A log x axis labelled at the points' own x values (the offered loads),
/// which plotters' powers of ten would mostly leave unlabelled.
fn log_x_axis(x0: f64, x1: f64, lines: &[&Line]) -> WithKeyPoints<LogCoord<f64>> {
    let mut ticks: Vec<f64> = lines
        .iter()
        .flat_map(|l| l.points.iter().map(|p| p.0))
        .collect();
    ticks.sort_by(f64::total_cmp);
    ticks.dedup();
    (x0..x1).log_scale().with_key_points(ticks)
}

/// Axis labels: whole numbers without a fraction.
fn tick(v: &f64) -> String {
    if v.abs() >= 100.0 || v.fract() == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

/// One panel's axes and lines; `xs` is the x range's ends (for the goal line).
/// On a log y axis values under 1 are drawn at 1 (its floor).
fn draw_chart<X, Y>(
    area: &Area<'_>,
    p: &Panel,
    lines: &[&Line],
    x: X,
    y: Y,
    xs: (f64, f64),
) -> Result<()>
where
    X: AsRangedCoord<Value = f64>,
    X::CoordDescType: Ranged<ValueType = f64> + ValueFormatter<f64>,
    Y: AsRangedCoord<Value = f64>,
    Y::CoordDescType: Ranged<ValueType = f64> + ValueFormatter<f64>,
{
    let clamp = |y: f64| if p.log_y { y.max(1.0) } else { y };
    let mut chart = ChartBuilder::on(area)
        .margin(12)
        .x_label_area_size(45)
        .y_label_area_size(70)
        .build_cartesian_2d(x, y)?;
    chart
        .configure_mesh()
        .x_desc(p.x_desc.as_str())
        .y_desc(p.y_desc.as_str())
        .x_labels(10)
        .y_labels(8)
        .x_label_formatter(&tick)
        .y_label_formatter(&tick)
        .label_style((FONT, 15))
        .axis_desc_style((FONT, 16))
        .light_line_style(RGBColor(238, 238, 238))
        .draw()?;
    if let Some((g, _)) = &p.goal {
        let s = BLACK.stroke_width(1);
        chart.draw_series(DashedLineSeries::new(vec![(xs.0, *g), (xs.1, *g)], 6, 4, s))?;
    }
    for l in lines {
        let style = l.color.stroke_width(l.width);
        let pts: Vec<(f64, f64)> = l.points.iter().map(|&(x, y)| (x, clamp(y))).collect();
        // A short run has few samples: mark them, or a single one would not show.
        if pts.len() <= 20 {
            chart.draw_series(pts.iter().map(|&p| Circle::new(p, 3, l.color.filled())))?;
        }
        if l.dashed {
            chart.draw_series(DashedLineSeries::new(pts, 6, 4, style))?;
        } else {
            chart.draw_series(LineSeries::new(pts, style))?;
        }
    }
    Ok(())
}

// ---------------------------------------------------------------- input

struct Args {
    results: PathBuf,
    out: PathBuf,
    record_size: u64,
    /// The lag run panel (c) shows: `mm2_NAME.lag.timeline` and `kmirror_NAME.lag.timeline`.
    lag_run: String,
    font: PathBuf,
    title: String,
}

const USAGE: &str =
    "usage: bench-chart --results DIR --out FILE.png [--record-size B (default 1024)] \
[--lag-run NAME (default lag: mm2_NAME.lag.timeline, kmirror_NAME.lag.timeline)] [--font TTF (default /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf)] [--title TEXT]";

fn parse_args(argv: impl IntoIterator<Item = String>) -> Result<Args> {
    let mut results = None;
    let mut out = None;
    let mut record_size = 1024u64;
    let mut lag_run = "lag".to_string();
    let mut font = PathBuf::from(DEFAULT_FONT);
    let mut title = "scripts/bench: MirrorMaker 2 and kmirror over time".to_string();
    let mut it = argv.into_iter();
    while let Some(a) = it.next() {
        let mut val = || {
            it.next()
                .ok_or_else(|| anyhow!("{a} needs a value\n{USAGE}"))
        };
        match a.as_str() {
            "--results" => results = Some(PathBuf::from(val()?)),
            "--out" => out = Some(PathBuf::from(val()?)),
            "--record-size" => {
                let v = val()?;
                record_size = v.parse().ok().filter(|&n| n > 0).ok_or_else(|| {
                    anyhow!("--record-size must be a positive number of bytes, got `{v}`")
                })?;
            }
            "--lag-run" => {
                let v = val()?;
                if v.is_empty() || v.contains('/') {
                    bail!("--lag-run must be a run name such as curve_10000 (no `/`), got `{v}`");
                }
                lag_run = v;
            }
            "--font" => font = PathBuf::from(val()?),
            "--title" => title = val()?,
            _ => bail!("unknown argument `{a}`\n{USAGE}"),
        }
    }
    Ok(Args {
        results: results.ok_or_else(|| anyhow!("--results DIR is required\n{USAGE}"))?,
        out: out.ok_or_else(|| anyhow!("--out FILE.png is required\n{USAGE}"))?,
        record_size,
        lag_run,
        font,
        title,
    })
}

/// Reads DIR/NAME if it exists; None (with a note) when it is missing or empty.
fn read_optional<T>(
    dir: &Path,
    name: &str,
    parse: fn(&str, &str) -> Result<Vec<T>>,
) -> Result<Option<Vec<T>>> {
    let path = dir.join(name);
    let shown = path.display().to_string();
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            eprintln!("bench-chart: {shown} not found, skipped");
            return Ok(None);
        }
        Err(e) => return Err(e).with_context(|| format!("cannot read {shown}")),
    };
    let rows = parse(&text, &shown)?;
    if rows.is_empty() {
        eprintln!("bench-chart: {shown} is empty, skipped");
        return Ok(None);
    }
    Ok(Some(rows))
}

fn load_font(path: &Path) -> Result<()> {
    let bytes = std::fs::read(path).with_context(|| {
        format!(
            "cannot read the font {} (pass another TTF with --font; Debian: apt-get install fonts-dejavu-core)",
            path.display()
        )
    })?;
    let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
    plotters::style::register_font(FONT, FontStyle::Normal, bytes)
        .map_err(|_| anyhow!("{} is not a TrueType/OpenType font", path.display()))
}

fn run(args: Args) -> Result<()> {
    let dir = &args.results;
    if !dir.is_dir() {
        bail!("--results {}: not a directory", dir.display());
    }
    let watch = |prefix: &str| -> Result<Option<Vec<Sample>>> {
        let Some(samples) = read_optional(dir, &format!("{prefix}.timeline"), parse_watch)? else {
            return Ok(None);
        };
        let path = dir.join(format!("{prefix}.start_ms"));
        let start = match std::fs::read_to_string(&path) {
            Ok(t) => Some(parse_start_ms(&t, &path.display().to_string())?),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(e).with_context(|| format!("cannot read {}", path.display())),
        };
        Ok(Some(with_start(samples, start)))
    };
    let lag = |name: &str| read_optional(dir, name, parse_lag);
    let mm2 = watch("mm2")?;
    let km = watch("kmirror")?;
    let mm2_small = watch("mm2_small")?;
    let km_small = watch("kmirror_small")?;
    let mm2_lag_file = format!("mm2_{}.lag.timeline", args.lag_run);
    let km_lag_file = format!("kmirror_{}.lag.timeline", args.lag_run);
    let mm2_lag = lag(&mm2_lag_file)?;
    let km_lag = lag(&km_lag_file)?;
    let curve = read_optional(dir, "curve.tsv", parse_curve)?;
    let mm2_backlog = watch("mm2_backlog100")?;
    let km_backlog = watch("kmirror_backlog100")?;
    if [&mm2, &km, &mm2_small, &km_small, &mm2_backlog, &km_backlog]
        .iter()
        .all(|t| t.is_none())
        && mm2_lag.is_none()
        && km_lag.is_none()
        && curve.is_none()
    {
        bail!(
            "no timelines in {} (expected mm2.timeline, kmirror.timeline, mm2_small.timeline, \
             kmirror_small.timeline, {mm2_lag_file}, {km_lag_file}, curve.tsv, \
             mm2_backlog100.timeline or kmirror_backlog100.timeline)",
            dir.display()
        );
    }
    // "curve_10000" is the curve's level at 10000 records/s.
    let lag_caption = match args.lag_run.strip_prefix("curve_") {
        Some(rate) => format!("(c) lag per second of the window, at {rate} records/s"),
        None => format!("(c) lag per second of the window, run {}", args.lag_run),
    };
    load_font(&args.font)?;

    let rs = args.record_size;
    let tput =
        |t: &Option<Vec<Sample>>| t.as_deref().map(|s| throughput(s, rs)).unwrap_or_default();
    let rss = |t: &Option<Vec<Sample>>| t.as_deref().map(rss_mib).unwrap_or_default();
    let copy_x = "seconds since the mirror was started";
    let mbs_y = format!("MB/s (MiB of {rs} B record values per s)");
    let copy_panel =
        |caption: &str, mm2: &Option<Vec<Sample>>, km: &Option<Vec<Sample>>, files: &str| Panel {
            caption: caption.into(),
            x_desc: copy_x.into(),
            y_desc: mbs_y.clone(),
            log_x: false,
            log_y: false,
            goal: None,
            lines: vec![
                Line::new("MirrorMaker 2", tput(mm2), MM2),
                Line::new("kmirror", tput(km), KMIRROR),
            ],
            missing: format!("no {files}"),
        };
    let panels = [
        copy_panel(
            "(a) copy throughput",
            &mm2,
            &km,
            "mm2.timeline or kmirror.timeline",
        ),
        copy_panel(
            "(b) small-batch copy throughput",
            &mm2_small,
            &km_small,
            "mm2_small.timeline or kmirror_small.timeline",
        ),
        Panel {
            caption: lag_caption,
            x_desc: "second of the lag window (record CreateTime)".into(),
            y_desc: "lag: consumer poll - CreateTime (ms, log)".into(),
            log_x: false,
            log_y: true,
            goal: None,
            lines: lag_lines("MM2", mm2_lag.as_deref(), MM2, MM2_SOURCE)
                .into_iter()
                .chain(lag_lines(
                    "kmirror",
                    km_lag.as_deref(),
                    KMIRROR,
                    KMIRROR_SOURCE,
                ))
                .collect(),
            missing: format!("no {mm2_lag_file} or {km_lag_file}"),
        },
        Panel {
            caption: "(d) mirror RSS during the copies".into(),
            x_desc: copy_x.into(),
            y_desc: "RSS (MiB, log scale)".into(),
            log_x: false,
            log_y: true,
            goal: None,
            lines: vec![
                Line::new("MirrorMaker 2", rss(&mm2), MM2),
                Line::new("kmirror", rss(&km), KMIRROR),
                Line::new("MM2, small batches", rss(&mm2_small), MM2).dashed(),
                Line::new("kmirror, small batches", rss(&km_small), KMIRROR).dashed(),
            ],
            missing: "no copy timeline with RSS samples".into(),
        },
        Panel {
            caption: "(e) lag added by the mirror vs offered load".into(),
            x_desc: "offered load (records/s, log scale)".into(),
            y_desc: "ms (log scale; 0 drawn at 1)".into(),
            log_x: true,
            log_y: true,
            goal: Some((5.0, "goal at 10000/s: added p99 <= 5 ms".into())),
            lines: curve_lines(curve.as_deref().unwrap_or_default()),
            missing: "no curve.tsv".into(),
        },
        Panel {
            caption: "(f) mirror RSS copying the 100-partition backlog".into(),
            x_desc: copy_x.into(),
            y_desc: "RSS (MiB, log scale)".into(),
            log_x: false,
            log_y: true,
            goal: Some((64.0, "goal: <= 64 MiB".into())),
            lines: vec![
                Line::new("MirrorMaker 2", rss(&mm2_backlog), MM2),
                Line::new("kmirror", rss(&km_backlog), KMIRROR),
            ],
            missing: "no mm2_backlog100.timeline or kmirror_backlog100.timeline".into(),
        },
    ];

    {
        let root = BitMapBackend::new(&args.out, (1600, 1500)).into_drawing_area();
        root.fill(&WHITE)?;
        let (top, body) = root.split_vertically(44);
        top.draw(&Text::new(args.title.clone(), (16, 10), (FONT, 26)))?;
        for (area, panel) in body.split_evenly((3, 2)).iter().zip(&panels) {
            draw_panel(area, panel).with_context(|| format!("drawing {}", panel.caption))?;
        }
        root.present()
            .with_context(|| format!("cannot write {}", args.out.display()))?;
    }
    eprintln!("bench-chart: wrote {}", args.out.display());
    Ok(())
}

fn main() -> ExitCode {
    if std::env::args().skip(1).any(|a| a == "-h" || a == "--help") {
        println!("{USAGE}");
        return ExitCode::SUCCESS;
    }
    match parse_args(std::env::args().skip(1)).and_then(run) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bench-chart: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(wall_ms: i64, sum: i64) -> Sample {
        Sample {
            wall_ms,
            end_offset_sum: sum,
            cpu_ticks: 1,
            rss_kb: 2048,
            hwm_kb: 4096,
        }
    }

    #[test]
    fn watch_lines_parse() {
        let t = parse_watch("1000 0 5 2048 4096\n\n1200 512 -1 -1 -1\n", "x").unwrap();
        assert_eq!(t.len(), 2);
        assert_eq!(t[0], s(1000, 0).with_cpu(5));
        assert_eq!(
            t[1],
            Sample {
                wall_ms: 1200,
                end_offset_sum: 512,
                cpu_ticks: -1,
                rss_kb: -1,
                hwm_kb: -1
            }
        );
    }

    #[test]
    fn watch_errors_name_file_and_line() {
        let e = parse_watch(
            "1000 0 5 2048 4096\n1200 x 5 2048 4096\n",
            "dir/mm2.timeline",
        )
        .unwrap_err();
        assert!(e.to_string().starts_with("dir/mm2.timeline:2:"), "{e}");
        let e = parse_watch("1000 0 5 2048\n", "f").unwrap_err();
        assert!(e.to_string().starts_with("f:1:"), "{e}");
        let e = parse_watch("1000 0 5 2048 4096 7\n", "f").unwrap_err();
        assert!(e.to_string().starts_with("f:1:"), "{e}");
        let e = parse_watch("2000 0 1 1 1\n1000 0 1 1 1\n", "f").unwrap_err();
        assert!(e.to_string().starts_with("f:2:"), "{e}");
    }

    #[test]
    fn throughput_is_mib_per_second_between_samples() {
        // 1024 records of 1 KiB in 0.5 s = 2 MiB/s; then 0 (stalled), an
        // unknown sum (skipped, the next interval spans it), 2048 records in 1 s.
        let t = [
            s(10_000, 0),
            s(10_500, 1024),
            s(11_000, 1024),
            s(11_200, -1),
            s(12_000, 3072),
        ];
        let v = throughput(&t, 1024);
        let steps = vec![
            (0.0, 2.0),
            (0.5, 2.0),
            (0.5, 0.0),
            (1.0, 0.0),
            (1.0, 2.0),
            (2.0, 2.0),
        ];
        assert_eq!(v, steps);
        assert!(throughput(&t[..1], 1024).is_empty());
        assert!(throughput(&[], 1024).is_empty());
        // the record size scales it
        assert_eq!(throughput(&t[..2], 2048), vec![(0.0, 4.0), (0.5, 4.0)]);
    }

    #[test]
    fn start_ms_opens_the_timeline() {
        assert_eq!(parse_start_ms("9500\n", "f").unwrap(), 9500);
        let e = parse_start_ms("soon", "d/kmirror.start_ms").unwrap_err();
        assert!(e.to_string().starts_with("d/kmirror.start_ms:1:"), "{e}");
        // 1024 records already there at the first sample, 1 s after the start
        let t = with_start(vec![s(10_500, 1024), s(11_000, 2048)], Some(9_500));
        assert_eq!(t[0].wall_ms, 9_500);
        assert_eq!(
            throughput(&t, 1024),
            vec![(0.0, 1.0), (1.0, 1.0), (1.0, 2.0), (1.5, 2.0)]
        );
        assert_eq!(rss_mib(&t), vec![(1.0, 2.0), (1.5, 2.0)]);
        // without a start (or a start after the first sample) the first sample opens it
        assert_eq!(with_start(vec![s(10_500, 1024)], None).len(), 1);
        assert_eq!(with_start(vec![s(10_500, 1024)], Some(11_000)).len(), 1);
        assert!(with_start(vec![], Some(1)).is_empty());
    }

    #[test]
    fn rss_skips_unknown_samples() {
        let mut gone = s(3000, 5);
        gone.rss_kb = -1;
        assert_eq!(rss_mib(&[s(1000, 0), gone]), vec![(0.0, 2.0)]);
    }

    #[test]
    fn lag_lines_parse_and_make_series() {
        let text = "source 0 10 3 9 12\nsource 1 0 -1 -1 -1\nsource 2 5 4 8 8\n\
                    destination 0 10 30 90 120\ndestination 1 7 31 91 99\n";
        let rows = parse_lag(text, "f").unwrap();
        assert_eq!(rows.len(), 5);
        assert_eq!(
            rows[3],
            LagSecond {
                side: LagSide::Destination,
                second: 0,
                count: 10,
                p50: 30,
                p99: 90,
                max: 120
            }
        );
        assert_eq!(
            lag_series(&rows, LagSide::Source, |r| r.p99),
            vec![(0.0, 9.0), (2.0, 8.0)]
        );
        assert_eq!(
            lag_series(&rows, LagSide::Destination, |r| r.p50),
            vec![(0.0, 30.0), (1.0, 31.0)]
        );
    }

    #[test]
    fn lag_errors_name_file_and_line() {
        for bad in [
            "source 0 10 3 9\n",
            "sauce 0 10 3 9 12\n",
            "source -1 10 3 9 12\n",
            "source 0 ten 3 9 12\n",
            "source 0 10 3 9 1.5\n",
        ] {
            let e = parse_lag(
                &format!("destination 0 1 1 1 1\n{bad}"),
                "r/kmirror_lag.lag.timeline",
            )
            .unwrap_err();
            assert!(
                e.to_string().starts_with("r/kmirror_lag.lag.timeline:2:"),
                "{bad}: {e}"
            );
        }
    }

    #[test]
    fn curve_lines_parse_and_make_series() {
        let text = "# mirror offered achieved source_p50 source_p99 p99 added_p50 added_p99\n\
                    mm2 10000 9990 7 15 26 9 16\n\
                    kmirror 10000 9980 7 14 19 2 4\n\
                    mm2 5000 5000 6 12 20 8 14\n\
                    kmirror 5000 n/a n/a n/a n/a n/a n/a\n";
        let rows = parse_curve(text, "f").unwrap();
        assert_eq!(rows.len(), 4);
        assert_eq!(
            rows[1],
            CurveLevel {
                mirror: Mirror::Kmirror,
                offered: 10000.0,
                source_p99: Some(14.0),
                added_p50: Some(2.0),
                added_p99: Some(4.0)
            }
        );
        // by offered load, whatever the file's order
        assert_eq!(
            curve_series(&rows, Mirror::Mm2, |r| r.added_p99),
            vec![(5000.0, 14.0), (10000.0, 16.0)]
        );
        // a level without the figure (n/a) is left out, not drawn at 0
        assert_eq!(
            curve_series(&rows, Mirror::Kmirror, |r| r.added_p99),
            vec![(10000.0, 4.0)]
        );
        let lines = curve_lines(&rows);
        assert_eq!(lines.len(), 6);
        assert_eq!(lines[3].label, "kmirror added p99");
        assert_eq!(lines[5].points, vec![(10000.0, 14.0)]);
    }

    #[test]
    fn curve_errors_name_file_and_line() {
        for bad in [
            "mm2 10000 1 2 3 4 5\n",
            "mm3 10000 1 2 3 4 5 6\n",
            "mm2 0 1 2 3 4 5 6\n",
            "mm2 n/a 1 2 3 4 5 6\n",
            "mm2 10000 1 2 3 4 five 6\n",
            "kmirror 10000 1 2 3 4 5 -6\n",
        ] {
            let e = parse_curve(
                &format!("# header\nmm2 1 1 1 1 1 1 1\n{bad}"),
                "r/curve.tsv",
            )
            .unwrap_err();
            assert!(e.to_string().starts_with("r/curve.tsv:3:"), "{bad}: {e}");
        }
    }

    #[test]
    fn args_parse() {
        let a = parse_args(
            ["--results", "d", "--out", "o.png", "--record-size", "512"].map(String::from),
        )
        .unwrap();
        assert_eq!(
            (a.results, a.out, a.record_size),
            ("d".into(), "o.png".into(), 512)
        );
        assert_eq!(a.font, PathBuf::from(DEFAULT_FONT));
        assert_eq!(a.lag_run, "lag");
        let a = parse_args(
            ["--results", "d", "--out", "o", "--lag-run", "curve_10000"].map(String::from),
        )
        .unwrap();
        assert_eq!(a.lag_run, "curve_10000");
        for bad in ["", "../x"] {
            assert!(parse_args(
                ["--results", "d", "--out", "o", "--lag-run", bad].map(String::from)
            )
            .is_err());
        }
        assert!(parse_args(["--results", "d"].map(String::from)).is_err());
        assert!(parse_args(
            ["--results", "d", "--out", "o", "--record-size", "0"].map(String::from)
        )
        .is_err());
        assert!(parse_args(["--bogus".to_string()]).is_err());
    }

    /// Arguments that read `dir` and write where nothing can be written.
    fn args_for(dir: &std::path::Path) -> Args {
        parse_args(
            [
                "--results",
                dir.to_str().unwrap(),
                "--out",
                "/nonexistent/x.png",
            ]
            .map(String::from),
        )
        .unwrap()
    }

    #[test]
    fn no_timelines_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let a = args_for(dir.path());
        let e = run(a).unwrap_err();
        assert!(e.to_string().contains("no timelines"), "{e}");
    }

    #[test]
    fn bad_line_in_a_results_dir_is_reported() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("kmirror.timeline"), "1 0 0 0 0\ngarbage\n").unwrap();
        let a = args_for(dir.path());
        let e = run(a).unwrap_err().to_string();
        assert!(e.contains("kmirror.timeline:2:"), "{e}");
    }

    /// The issue-17 panels draw from a results dir that holds only them: the
    /// log-log curve (levels with n/a among them) and the backlog's RSS.
    #[test]
    fn curve_and_backlog_draw() {
        if !Path::new(DEFAULT_FONT).exists() {
            panic!("{DEFAULT_FONT} is missing (Debian: apt-get install fonts-dejavu-core)");
        }
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("curve.tsv"),
            "# header\nmm2 5000 5000 6 12 20 8 14\nkmirror 5000 5000 6 12 15 0 3\n\
             mm2 160000 90000 400 900 1200 40 300\nkmirror 160000 n/a n/a n/a n/a n/a n/a\n",
        )
        .unwrap();
        std::fs::write(
            dir.path().join("kmirror_backlog100.timeline"),
            "1000 0 1 20480 20480\n1200 5000 2 61440 61440\n",
        )
        .unwrap();
        std::fs::write(
            dir.path().join("kmirror_curve_5000.lag.timeline"),
            "source 0 10 3 9 12\ndestination 0 10 30 90 120\n",
        )
        .unwrap();
        let out = dir.path().join("chart.png");
        let mut a = args_for(dir.path());
        a.out = out.clone();
        a.lag_run = "curve_5000".into();
        run(a).unwrap();
        assert!(std::fs::metadata(&out).unwrap().len() > 10_000);
    }

    impl Sample {
        fn with_cpu(mut self, c: i64) -> Self {
            self.cpu_ticks = c;
            self
        }
    }
}
