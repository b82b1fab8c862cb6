// tests/server/agent.test.mjs — an agent loop through the official OpenAI Node client (npm `openai`, v4) on the trained
// demo model (runs/aah, imported by aah-convert): a forced tool call whose arguments parse and fit the schema, the tool's
// result sent back as a tool turn, then an answer; the same call through the SDK's streaming helper
// (beta.chat.completions.stream) and its tool runner (beta.chat.completions.runTools). Run by tests/test_agent.sh.
//
// The demo model's context is 256 tokens and its run has no chat template: Qwen3's template (hermes) renders the tools'
// system block at 286 tokens with its tokenizer, so the server gets ChatML (no tools in the prompt) with
// --tool-call-parser hermes, and the grammar of tool_choice required or named writes the call.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import { createRequire } from 'node:module';
import os from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';

import { BUILD, startServer } from './lib.mjs';

const OpenAI = createRequire(path.resolve(process.env.AAH_OPENAI_DIR, 'package.json'))('openai');
const MODEL = 'checkpoint-10000';
const ADD = { type: 'function', function: { name: 'add', description: 'Adds two digits',
  parameters: { type: 'object', properties: { a: { type: 'integer', minimum: 0, maximum: 9 },
    b: { type: 'integer', minimum: 0, maximum: 9 } }, required: ['a', 'b'], additionalProperties: false } } };
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'aahd-agent-'));
let srv, client;

before(async () => {
  execFileSync(`${BUILD}/aah-convert`, ['import', '-q', 'runs/aah', path.join(tmp, 'aah')], { stdio: 'pipe' });
  srv = await startServer(['--chat-template', 'tests/data/chat/chatml.jinja', '--tool-call-parser', 'hermes'], {},
    path.join(tmp, 'aah', MODEL));
  client = new OpenAI({ baseURL: `${srv.base}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 30000 });
});
after(async () => {
  if (srv) {
    const r = await srv.stop();
    assert.equal(r.code, 0, srv.log());
  }
  fs.rmSync(tmp, { recursive: true, force: true });
});

// The arguments of an add call: JSON, and the schema's two digits.
function addArguments(call) {
  assert.equal(call.type, 'function');
  assert.equal(call.function.name, 'add');
  const args = JSON.parse(call.function.arguments);
  assert.deepEqual(Object.keys(args).sort(), ['a', 'b'], call.function.arguments);
  for (const v of [args.a, args.b]) assert.ok(Number.isInteger(v) && v >= 0 && v <= 9, call.function.arguments);
  return args;
}

const BASE = { model: MODEL, tools: [ADD], parallel_tool_calls: false, max_tokens: 120, seed: 3 };
const QUESTION = [{ role: 'user', content: 'What is 2 plus 3?' }];

test('required → a call, the tool result as a tool turn → auto → an answer', async () => {
  const messages = [...QUESTION];
  const first = await client.chat.completions.create({ ...BASE, messages, tool_choice: 'required' });
  const c = first.choices[0];
  assert.equal(c.finish_reason, 'tool_calls', JSON.stringify(c));
  assert.equal(c.message.content, null);
  assert.equal(c.message.tool_calls.length, 1);
  const call = c.message.tool_calls[0];
  assert.match(call.id, /^call_[A-Za-z0-9]{24}$/);
  const { a, b } = addArguments(call);
  // the client sends back the assistant turn as it came (content null) and the tool's result
  messages.push(c.message, { role: 'tool', tool_call_id: call.id, content: String(a + b) });
  const second = await client.chat.completions.create({ ...BASE, messages, tool_choice: 'auto', max_tokens: 24 });
  const answer = second.choices[0];
  assert.ok(['stop', 'length'].includes(answer.finish_reason), JSON.stringify(answer));
  assert.equal(typeof answer.message.content, 'string');
  assert.ok(second.usage.prompt_tokens > first.usage.prompt_tokens, 'the call and its result are in the prompt');
});

test('beta.chat.completions.stream: the streamed call equals the whole one', async () => {
  const params = { ...BASE, messages: QUESTION, tool_choice: 'required' };
  const whole = await client.chat.completions.create(params);
  const stream = client.beta.chat.completions.stream(params);
  const seen = [];
  stream.on('tool_calls.function.arguments.done', (e) => seen.push(e));
  const final = await stream.finalChatCompletion();
  const [w, s] = [whole.choices[0], final.choices[0]];
  assert.equal(s.finish_reason, w.finish_reason);
  assert.equal(s.message.tool_calls.length, 1);
  assert.equal(s.message.tool_calls[0].id, w.message.tool_calls[0].id);
  assert.equal(s.message.tool_calls[0].function.name, 'add');
  assert.equal(s.message.tool_calls[0].function.arguments, w.message.tool_calls[0].function.arguments);
  addArguments(s.message.tool_calls[0]);
  assert.equal(seen.length, 1, 'the helper saw the arguments end');
  assert.equal(seen[0].arguments, w.message.tool_calls[0].function.arguments);
});

test('beta.chat.completions.runTools: the SDK calls the function with the parsed arguments', async () => {
  const calls = [];
  const runner = client.beta.chat.completions.runTools({ ...BASE, messages: QUESTION,
    tool_choice: { type: 'function', function: { name: 'add' } },
    tools: [{ type: 'function', function: { ...ADD.function, parse: JSON.parse,
      function: (args) => { calls.push(args); return String(args.a + args.b); } } }] });
  await runner.done();
  assert.equal(calls.length, 1, 'a named tool_choice runs the function once');
  const msgs = runner.messages;
  const tool = msgs.find((m) => m.role === 'tool');
  assert.equal(tool.content, String(calls[0].a + calls[0].b));
  addArguments(msgs.find((m) => m.role === 'assistant').tool_calls[0]);
});
