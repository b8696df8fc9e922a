import type uPlot from "uplot";
import { bucketLabel, compact } from "../lib/format";
import { cssVar, seriesColors } from "../lib/theme";
import { UPlot } from "./UPlot";

export interface Series {
  label: string;
  values: (number | null)[];
  /** Draw as a thicker line (the total). */
  strong?: boolean;
}

interface Props {
  title: string;
  times: number[];
  bucketMs: number;
  series: Series[];
  format?: (v: number) => string;
  /** Counts: ticks on whole numbers only. */
  integer?: boolean;
  testid?: string;
}

/** Tick steps for counts: never a fraction of a request. */
const WHOLE = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1e3, 2e3, 5e3, 1e4, 2e4, 5e4, 1e5, 2e5, 5e5, 1e6, 2e6, 5e6, 1e7, 1e8, 1e9];

/** One usage chart: a line per series over the buckets, with a legend that doubles as a tooltip. */
export function UsageChart({ title, times, bucketMs, series, format = compact, integer = true, testid }: Props) {
  const shape = `${title}|${bucketMs}|${series.map((s) => s.label).join(",")}`;
  const options = (width: number): uPlot.Options => {
    const colors = seriesColors();
    const axis = cssVar("--text-muted");
    const grid = cssVar("--grid");
    const font = `11px ${cssVar("--font-mono") || "monospace"}`;
    return {
      width,
      height: 180,
      legend: { live: true },
      cursor: { points: { size: 6 }, drag: { x: false, y: false } },
      scales: { x: { time: true }, y: { range: (_u, _min, max) => [0, max > 0 ? max * 1.1 : 1] } },
      axes: [
        {
          stroke: axis,
          grid: { stroke: grid, width: 1 },
          ticks: { stroke: grid, width: 1 },
          font,
          values: (_u, splits) => splits.map((s) => bucketLabel(s * 1000, bucketMs)),
        },
        {
          stroke: axis,
          grid: { stroke: grid, width: 1 },
          ticks: { show: false },
          font,
          size: 48,
          ...(integer ? { incrs: WHOLE } : {}),
          values: (_u, splits) => splits.map((v) => format(v)),
        },
      ],
      series: [
        { label: bucketMs >= 86_400_000 ? "Day" : "Hour", value: (_u, v) => (v == null ? "" : bucketLabel(v * 1000, bucketMs)) },
        ...series.map((s, i) => ({
          label: s.label,
          stroke: s.strong ? cssVar("--text") : colors[i % colors.length],
          width: s.strong ? 2 : 1.5,
          points: { show: times.length < 40, size: 4 },
          value: (_u: uPlot, v: number | null) => (v == null ? "—" : format(v)),
          spanGaps: false,
        })),
      ],
    };
  };
  const data = [times, ...series.map((s) => s.values)] as uPlot.AlignedData;
  return (
    <figure class="card usage-chart" data-testid={testid}>
      <figcaption>{title}</figcaption>
      {series.length === 0 ? (
        <p class="muted small chart-empty">Nothing in this range.</p>
      ) : (
        <UPlot options={options} data={data} shape={shape} label={title} />
      )}
    </figure>
  );
}
