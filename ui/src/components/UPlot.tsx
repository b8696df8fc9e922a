import { useEffect, useRef } from "preact/hooks";
import uPlot from "uplot";
import "uplot/dist/uPlot.min.css";
import { scheme } from "../lib/theme";

interface Props {
  /** Builds the options for a width (called again when the colour scheme changes). */
  options: (width: number) => uPlot.Options;
  data: uPlot.AlignedData;
  /** Changes when the series change (not their values): the chart is built anew. */
  shape: string;
  class?: string;
  label: string;
}

/** A uPlot chart that fills its container's width and follows the colour scheme. */
export function UPlot({ options, data, shape, class: cls, label }: Props) {
  const box = useRef<HTMLDivElement>(null);
  const plot = useRef<uPlot | null>(null);
  const theme = scheme.value;

  useEffect(() => {
    const el = box.current;
    if (!el) return;
    const width = Math.max(el.clientWidth, 120);
    const u = new uPlot(options(width), data, el);
    plot.current = u;
    const resize = new ResizeObserver(() => {
      const w = Math.max(el.clientWidth, 120);
      if (Math.abs(w - u.width) > 1) u.setSize({ width: w, height: u.height });
    });
    resize.observe(el);
    return () => {
      resize.disconnect();
      u.destroy();
      plot.current = null;
    };
    // Rebuilt only when the series or the theme change; new values go through setData below.
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [shape, theme]);

  useEffect(() => {
    plot.current?.setData(data);
  }, [data]);

  return <div ref={box} class={cls ?? "chart"} role="img" aria-label={label} />;
}
