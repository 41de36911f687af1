//! The comparison's plots, SVG and PNG, with `plotters`.
//!
//! Text needs a font: plotters' `ab_glyph` feature draws with a TrueType
//! file registered at run time (no fontconfig, no system library), looked
//! for among the usual DejaVu and Liberation paths. Without one, no plot
//! is drawn and the reason is reported; the CSV files hold the same data.
use std::path::Path;
use std::sync::OnceLock;

use plotters::prelude::*;

use crate::compare_report::CompareReport;

const FONTS: [&str; 5] = [
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
    "/usr/share/fonts/liberation/LiberationSans-Regular.ttf",
];

/// Registers the first font found, once; the error says which paths were tried.
fn font() -> Result<(), String> {
    static RESULT: OnceLock<Result<(), String>> = OnceLock::new();
    RESULT
        .get_or_init(|| {
            for path in FONTS {
                if let Ok(bytes) = std::fs::read(path) {
                    // Registered fonts live for the whole process.
                    let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
                    if plotters::style::register_font("sans-serif", FontStyle::Normal, bytes)
                        .is_ok()
                    {
                        return Ok(());
                    }
                }
            }
            Err(format!(
                "no TrueType font found for the plots' text (tried {}); install fonts-dejavu-core",
                FONTS.join(", ")
            ))
        })
        .clone()
}

type Series = (String, Vec<(f64, f64)>);

fn draw<B: DrawingBackend>(
    root: DrawingArea<B, plotters::coord::Shift>,
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series],
) -> Result<(), String>
where
    B::ErrorType: 'static,
{
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let points = series.iter().flat_map(|(_, p)| p.iter());
    let (mut x0, mut x1, mut y1) = (f64::MAX, f64::MIN, 0.0f64);
    for &(x, y) in points {
        x0 = x0.min(x);
        x1 = x1.max(x);
        y1 = y1.max(y);
    }
    if x0 > x1 {
        (x0, x1) = (0.0, 1.0);
    }
    if x0 == x1 {
        x1 = x0 + 1.0;
    }
    let y1 = if y1 > 0.0 { y1 * 1.15 } else { 1.0 };
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(x0..x1, 0.0..y1)
        .map_err(|e| e.to_string())?;
    chart
        .configure_mesh()
        .x_desc(x_label)
        .y_desc(y_label)
        .draw()
        .map_err(|e| e.to_string())?;
    for (name, points) in series {
        // One colour per mode in every plot.
        let color = match name.split_whitespace().next() {
            Some("none" | "direct") => RED,
            Some("htb") => BLUE,
            Some("pspat") => GREEN,
            Some("unloaded") => MAGENTA,
            _ => BLACK,
        };
        chart
            .draw_series(LineSeries::new(
                points.iter().copied(),
                color.stroke_width(2),
            ))
            .map_err(|e| e.to_string())?
            .label(name.as_str())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], color));
        chart
            .draw_series(points.iter().map(|&p| Circle::new(p, 3, color.filled())))
            .map_err(|e| e.to_string())?;
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(|e| e.to_string())?;
    root.present().map_err(|e| e.to_string())?;
    Ok(())
}

fn both(
    out: &Path,
    stem: &str,
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series],
    files: &mut Vec<String>,
) -> Result<(), String> {
    let svg = out.join(format!("{stem}.svg"));
    draw(
        SVGBackend::new(&svg, (800, 500)).into_drawing_area(),
        title,
        x_label,
        y_label,
        series,
    )?;
    files.push(svg.display().to_string());
    let png = out.join(format!("{stem}.png"));
    draw(
        BitMapBackend::new(&png, (800, 500)).into_drawing_area(),
        title,
        x_label,
        y_label,
        series,
    )?;
    files.push(png.display().to_string());
    Ok(())
}

fn collect<T>(rows: &[T], x: impl Fn(&T) -> f64, y: impl Fn(&T) -> Option<f64>) -> Vec<(f64, f64)> {
    rows.iter()
        .filter_map(|r| y(r).map(|v| (x(r), v)))
        .collect()
}

/// Draws the three plots; returns the files or why not.
pub(crate) fn draw_all(out: &Path, report: &CompareReport) -> Result<Vec<String>, String> {
    font()?;
    let mut files = Vec::new();
    let t = &report.throughput;
    let series: Vec<Series> = vec![
        (
            "none (bridge)".into(),
            collect(t, |r| r.senders as f64, |r| r.none_mpps),
        ),
        (
            "htb".into(),
            collect(t, |r| r.senders as f64, |r| r.htb_mpps),
        ),
        (
            "pspat".into(),
            collect(t, |r| r.senders as f64, |r| r.pspat_mpps),
        ),
    ];
    both(
        out,
        "throughput",
        "Throughput against senders, 60-byte frames",
        "senders",
        "Mpps received",
        &series,
        &mut files,
    )?;
    let s = &report.split_10_1;
    let series: Vec<Series> = vec![
        (
            "ideal".into(),
            collect(s, |r| r.offered_fraction, |r| Some(r.ideal_heavy_share)),
        ),
        (
            "none (bridge)".into(),
            collect(s, |r| r.offered_fraction, |r| r.none_heavy_share),
        ),
        (
            "htb".into(),
            collect(s, |r| r.offered_fraction, |r| r.htb_heavy_share),
        ),
        (
            "pspat".into(),
            collect(s, |r| r.offered_fraction, |r| r.pspat_heavy_share),
        ),
    ];
    both(
        out,
        "split_10_1",
        "Heavy flow's share, weights 10:1, equal offers",
        "offered load / R",
        "share of bytes",
        &series,
        &mut files,
    )?;
    // Percentiles as "nines", -log10(1 - q): p50 0.3, p90 1, p99 2, p99.9 3.
    let quantiles = [0.5f64, 0.9, 0.99, 0.999].map(|q| -(1.0 - q).log10());
    let series: Vec<Series> = report
        .victim
        .latency
        .iter()
        .map(|(mode, l)| {
            let values = [l.p50_us, l.p90_us, l.p99_us, l.p999_us];
            (
                mode.clone(),
                quantiles.iter().copied().zip(values).collect(),
            )
        })
        .collect();
    both(
        out,
        "victim",
        "Victim's one-way latency",
        "percentile as nines: 1 = p90, 2 = p99, 3 = p99.9",
        "µs",
        &series,
        &mut files,
    )?;
    let l = &report.local_senders;
    if !l.is_empty() {
        let series: Vec<Series> = vec![
            (
                "direct (sendmmsg, no qdisc)".into(),
                collect(l, |r| r.senders as f64, |r| r.direct_mpps),
            ),
            (
                "htb (sendmmsg through HTB)".into(),
                collect(l, |r| r.senders as f64, |r| r.htb_mpps),
            ),
            (
                "pspat (clients of the runtime)".into(),
                collect(l, |r| r.senders as f64, |r| r.pspat_mpps),
            ),
        ];
        both(
            out,
            "local_senders",
            "Local senders, 60-byte frames",
            "sender threads",
            "Mpps received",
            &series,
            &mut files,
        )?;
    }
    Ok(files)
}
