// Bundles the page into drlcli/dashboard/static (served by drl dashboard; no CDN at run time).
import { build } from "esbuild";
import { copyFileSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const out = join(here, "..", "drlcli", "dashboard", "static");
mkdirSync(out, { recursive: true });
await build({
  entryPoints: [join(here, "src", "main.js")],
  bundle: true,
  minify: true,
  format: "iife",
  target: "es2020",
  outfile: join(out, "app.js"),
  logLevel: "warning",
});
const css = [
  readFileSync(join(here, "node_modules", "uplot", "dist", "uPlot.min.css"), "utf8"),
  readFileSync(join(here, "src", "app.css"), "utf8"),
].join("\n");
writeFileSync(join(out, "app.css"), css);
copyFileSync(join(here, "src", "index.html"), join(out, "index.html"));
console.log(`built ${out}`);
