import { defineConfig } from "vitest/config";

// The gateway serves these files under a strict content security policy (no inline script or style,
// nothing from another origin), so everything is bundled into hashed files under /assets.
export default defineConfig({
  esbuild: { jsx: "automatic", jsxImportSource: "preact" },
  build: {
    outDir: "dist",
    emptyOutDir: true,
    assetsInlineLimit: 0,
    // The page is served by the gateway on loopback: one small bundle, no preload polyfill needed.
    modulePreload: { polyfill: false },
    target: "es2022",
    sourcemap: false,
  },
  test: {
    include: ["src/**/*.test.ts"],
    environment: "node",
    // uPlot runs through vitest's module loader (its ES build, as in the page), so a test can load it
    // afresh after vi.resetModules (src/boot/boot.test.ts loads it under different navigators).
    server: { deps: { inline: ["uplot"] } },
  },
});
