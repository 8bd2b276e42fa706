'use strict';
// index.d.ts describes the public API the package exports at run time: every
// exported name, and every public method and accessor of its classes.
const { it } = require('node:test');
const assert = require('node:assert/strict');
const path = require('node:path');
const ts = require('typescript');
const runtime = require('..');

function declared() {
  const file = path.join(__dirname, '..', 'index.d.ts');
  const program = ts.createProgram([file], { strict: true, types: ['node'], noEmit: true });
  const diagnostics = ts.getPreEmitDiagnostics(program);
  assert.deepEqual(
    diagnostics.map((d) => ts.flattenDiagnosticMessageText(d.messageText, '\n')),
    [],
    'index.d.ts does not type-check',
  );
  const checker = program.getTypeChecker();
  const mod = checker.getSymbolAtLocation(program.getSourceFile(file));
  const out = new Map();
  for (const sym of checker.getExportsOfModule(mod)) {
    const members = new Set();
    const decl = sym.declarations?.[0];
    if (decl && ts.isClassDeclaration(decl)) {
      for (const m of decl.members) {
        const isPrivate = m.modifiers?.some((x) => x.kind === ts.SyntaxKind.PrivateKeyword);
        if (m.name && !isPrivate) members.add(m.name.getText());
      }
    }
    out.set(sym.getName(), members);
  }
  return out;
}

/** publicMembers lists the methods and accessors a class defines itself, not its internals. */
function publicMembers(cls) {
  return Object.getOwnPropertyNames(cls.prototype).filter((n) => n !== 'constructor' && !n.startsWith('_'));
}

it('declares every runtime export and every public method and accessor', () => {
  const types = declared();
  for (const [name, value] of Object.entries(runtime)) {
    assert.ok(types.has(name), `index.d.ts does not export ${name}`);
    if (typeof value !== 'function' || !value.prototype) continue;
    for (const m of publicMembers(value)) {
      assert.ok(types.get(name).has(m), `index.d.ts does not declare ${name}.${m}`);
    }
  }
  for (const name of types.keys()) {
    const isInterface = types.get(name).size === 0 && !(name in runtime);
    assert.ok(name in runtime || isInterface, `index.d.ts exports ${name}, which the package does not`);
  }
});
