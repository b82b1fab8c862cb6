// tests/server/cpu_switches.test.mjs — the CPU backend's product switches as aahd keys (cpu_amx, cpu_bf16;
// server/config.c): a key other than auto overrides the environment variable the backend reads (AAH_AMX,
// AAH_CPU_BF16), auto leaves it, and the backend description /v1/stats serves (and the load line logs) says what was
// chosen; a value outside the key's list is refused at start with the key named, from a flag and from a file.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, writeFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { BUILD, MODEL, startServer, request } from './lib.mjs';

// the description of the backend a daemon started with these flags and environment runs, from /v1/stats and the log
async function backendOf(args, env = {}) {
  const s = await startServer(['--backend', 'cpu', ...args], env);
  try {
    const r = await request(s.port, 'GET', '/v1/stats');
    assert.equal(r.status, 200, r.text);
    const m = /"backend":\s*"(cpu \([^"]*\))"/.exec(r.text);
    assert.ok(m, `no cpu backend in /v1/stats: ${r.text.slice(0, 400)}`);
    assert.ok(s.log().includes(m[1]), `the load line does not name the backend ${m[1]}:\n${s.log()}`);
    return m[1];
  } finally {
    await s.stop();
  }
}

// aahd's exit code and stderr for arguments that must be refused before it listens
function refused(args) {
  return new Promise((resolve) => {
    const p = spawn(`${BUILD}/aahd`, ['--model', MODEL, '--port', '0', '--threads', '1', ...args], {
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    let err = '';
    p.stderr.on('data', (d) => { err += d; });
    const timer = setTimeout(() => p.kill('SIGKILL'), 20000);
    p.on('exit', (code) => {
      clearTimeout(timer);
      resolve({ code, err });
    });
  });
}

// the environment the test runs in must not choose for the daemons
const clean = { AAH_AMX: '', AAH_CPU_BF16: '', AAH_CPU_ISA: '', AAH_CPU_QPACK: '', AAH_CPU_QUANT_MATMUL: '' };

test('cpu_bf16 f32 overrides AAH_CPU_BF16; auto leaves it', async () => {
  const byEnv = await backendOf([], { ...clean, AAH_CPU_BF16: 'bf16' });
  const byKey = await backendOf(['--cpu-bf16', 'bf16'], clean);
  assert.equal(byKey, byEnv, 'cpu_bf16 bf16 and AAH_CPU_BF16=bf16 should choose alike');
  const over = await backendOf(['--cpu-bf16', 'f32'], { ...clean, AAH_CPU_BF16: 'bf16' });
  assert.match(over, /bf16 exact\)$/, 'cpu_bf16 f32 should win over AAH_CPU_BF16=bf16');
  if (!/bf16 on vdpbf16ps/.test(byEnv)) console.log(`note: no AVX-512 BF16 here (${byEnv}); bf16 runs the exact path`);
});

test('cpu_amx off and all reach the backend', async () => {
  const def = await backendOf([], clean);
  if (!def.includes('AMX-INT8')) {
    console.log(`note: no AMX-INT8 here (${def}); only the refusals are checked`);
    return;
  }
  assert.match(def, /AMX-INT8 tiles for every packed type/);
  assert.match(await backendOf(['--cpu-amx', 'off'], { ...clean, AAH_AMX: 'all' }), /VNNI packed products \(AAH_AMX=0\)/);
  assert.match(await backendOf(['--cpu-amx', 'all'], clean), /AMX-INT8 tiles for every packed type/);
  assert.match(await backendOf(['--cpu-amx', 'auto'], { ...clean, AAH_AMX: '0' }), /VNNI packed products \(AAH_AMX=0\)/);
});

test('a value outside the list is refused, naming the key', async () => {
  for (const [flag, value, key] of [['--cpu-bf16', 'fp8', 'cpu_bf16'], ['--cpu-amx', 'on', 'cpu_amx'],
    ['--cpu-amx', '', 'cpu_amx']]) {
    const r = await refused([flag, value]);
    assert.notEqual(r.code, 0, `${flag} '${value}' was accepted`);
    assert.ok(r.err.includes(key), `${flag} '${value}': the message does not name ${key}: ${r.err}`);
  }
  const dir = mkdtempSync(join(tmpdir(), 'aahd-cpu-'));
  try {
    const conf = join(dir, 'aahd.conf');
    writeFileSync(conf, '# a bad value in a file\ncpu_bf16 = "half"\n');
    const r = await refused(['--config', conf]);
    assert.notEqual(r.code, 0, 'cpu_bf16 = "half" in a file was accepted');
    assert.match(r.err, /aahd\.conf:2: .*cpu_bf16/, r.err);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
