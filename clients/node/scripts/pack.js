'use strict';
// Around `npm pack`: `node scripts/pack.js copy` (prepack) copies lockd's
// protos and LICENSE from the repository into the package; `clean`
// (postpack) removes them again, so a checkout always loads the repository's
// protos and never a stale copy.
const fs = require('node:fs');
const path = require('node:path');

const pkg = path.join(__dirname, '..');
const repo = path.join(pkg, '..', '..');
// [what to copy, the top entry to remove again]; only .proto files of proto/.
const copies = [
  ['proto/lockd/v1', 'proto'],
  ['LICENSE', 'LICENSE'],
];
const wanted = (src) => !fs.statSync(src).isFile() || !src.includes(`${path.sep}proto${path.sep}`) || src.endsWith('.proto');

switch (process.argv[2]) {
  case 'copy':
    for (const [from, to] of copies) fs.cpSync(path.join(repo, from), path.join(pkg, from), { recursive: true, filter: wanted });
    break;
  case 'clean':
    for (const [, to] of copies) fs.rmSync(path.join(pkg, to), { recursive: true, force: true });
    break;
  default:
    console.error('usage: node scripts/pack.js copy|clean');
    process.exit(2);
}
