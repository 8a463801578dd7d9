//! Best-so-far GFLOPS against trials as an SVG, one line per series (the bench's `--plot`,
//! the CLI's `tune --svg`). Behind the `plot` feature.

use plotters::prelude::*;
use std::path::Path;

/// One line: a kernel's name and its best-so-far GFLOPS after each trial (`None` before its
/// first valid trial).
pub struct Series {
    pub name: String,
    pub history: Vec<Option<f64>>,
}

fn err(e: impl std::fmt::Display) -> String {
    format!("drawing the plot: {e}")
}

/// Draws `series` into an SVG file at `path`.
pub fn draw(path: &Path, title: &str, series: &[Series]) -> Result<(), String> {
    let max_x = series
        .iter()
        .map(|s| s.history.len())
        .max()
        .unwrap_or(1)
        .max(2);
    let max_y = series
        .iter()
        .flat_map(|s| s.history.iter().flatten())
        .copied()
        .filter(|v| v.is_finite())
        .fold(0.0f64, f64::max);
    let max_y = if max_y > 0.0 { max_y * 1.1 } else { 1.0 };

    let root = SVGBackend::new(path, (1000, 620)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(14)
        .x_label_area_size(44)
        .y_label_area_size(64)
        .build_cartesian_2d(1usize..max_x, 0f64..max_y)
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc("trial")
        .y_desc("best-so-far GFLOPS")
        .draw()
        .map_err(err)?;
    for (i, s) in series.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        let points: Vec<(usize, f64)> = s
            .history
            .iter()
            .enumerate()
            .filter_map(|(t, v)| v.filter(|v| v.is_finite()).map(|v| (t + 1, v)))
            .collect();
        chart
            .draw_series(LineSeries::new(points, color.stroke_width(2)))
            .map_err(err)?
            .label(s.name.clone())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(err)?;
    root.present().map_err(err)?;
    Ok(())
}
