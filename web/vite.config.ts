// Vite builds the panel into the build directory (web/CMakeLists.txt passes --outDir); the files
// are then compiled into the `sovai` binary. Nothing is loaded from a CDN at run time, and the
// output has no inline script, as the panel's Content-Security-Policy requires.
import { defineConfig } from "vite";

export default defineConfig({
  base: "/",
  publicDir: "public",
  build: {
    target: "es2022",
    // The CSP allows scripts from the panel's origin only: no inline polyfill.
    modulePreload: { polyfill: false },
    assetsInlineLimit: 0,
    sourcemap: false,
    reportCompressedSize: false,
    chunkSizeWarningLimit: 200,
  },
  server: {
    // `npx vite web` during development: the API of a local `sovai server` behind the dev server.
    proxy: { "/v1": "http://127.0.0.1:8080" },
  },
});
