// First: the catch-all for a page that fails while loading, and a usable navigator.language for uPlot.
import "./boot";
import { render } from "preact";
import { App } from "./app";
import "./styles.css";

const root = document.getElementById("app");
if (root) render(<App />, root);
