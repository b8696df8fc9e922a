import { useMemo } from "preact/hooks";
import type uPlot from "uplot";
import { cssVar } from "../lib/theme";
import { UPlot } from "./UPlot";

/** Hourly requests of one key over the last day, as a small line. */
export function Sparkline({ times, values, label }: { times: number[]; values: number[]; label: string }) {
  const options = (width: number): uPlot.Options => ({
    width,
    height: 36,
    legend: { show: false },
    cursor: { show: false },
    select: { show: false, left: 0, top: 0, width: 0, height: 0 },
    scales: { x: { time: true }, y: { range: (_u, _min, max) => [0, Math.max(1, max)] } },
    axes: [{ show: false }, { show: false }],
    series: [
      {},
      {
        stroke: cssVar("--accent"),
        fill: cssVar("--accent-soft"),
        width: 1.5,
        points: { show: false },
      },
    ],
    padding: [2, 0, 2, 0],
  });
  const data = useMemo<uPlot.AlignedData>(() => [times, values], [times, values]);
  return <UPlot options={options} data={data} shape="spark" class="sparkline" label={label} />;
}
