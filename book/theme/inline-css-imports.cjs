// Inline the relative `@import './x.css'` rules of the Jupyter widgets' style sheets that the theme's
// JavaScript imports for their side effects. Remix 1.17 bundles such a sheet, but not the sheets it
// imports in turn ("An @import rule can only be used to import another CSS file": esbuild gives
// them its file loader). Run once after `npm ci`; it changes only those node_modules files.
const fs = require('fs');
const path = require('path');

const IMPORT = /@import\s+['"](\.\/[^'"]+\.css)['"]\s*;/g;

function inline(file, seen = new Set()) {
  if (seen.has(file)) return '';
  seen.add(file);
  return fs
    .readFileSync(file, 'utf8')
    .replace(IMPORT, (_, rel) => inline(path.join(path.dirname(file), rel), seen));
}

let changed = 0;
const root = path.join('node_modules', '@jupyter-widgets');
for (const pkg of fs.existsSync(root) ? fs.readdirSync(root) : []) {
  const dir = path.join(root, pkg, 'css');
  if (!fs.existsSync(dir)) continue;
  for (const name of fs.readdirSync(dir).filter((n) => n.endsWith('.css'))) {
    const file = path.join(dir, name);
    const text = fs.readFileSync(file, 'utf8');
    if (IMPORT.test(text)) {
      IMPORT.lastIndex = 0;
      fs.writeFileSync(file, inline(file));
      changed += 1;
    }
    IMPORT.lastIndex = 0;
  }
}
console.log(`inline-css-imports: ${changed} style sheets of @jupyter-widgets inlined`);
