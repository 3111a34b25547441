import Ajv2020, { type ErrorObject, type ValidateFunction } from 'ajv/dist/2020';
import addFormats from 'ajv-formats';
import { RE2JS } from 're2js';
import { joinPointer, type MappingProblem } from './mapping';

/**
 * The JSON Schemas (draft 2020-12) of synthetic tools: checked against the meta-schema and
 * compiled when saved, compiled once per tool version when run. Ajv with `strict: false`
 * (annotations and unknown keywords are allowed, as the draft allows them); no schema is
 * ever fetched (`$ref` to anything outside the schema does not compile).
 */
const MAX_SCHEMA_BYTES = 64 * 1024;

/**
 * The most pattern matching one validation may do: the characters tested times the size of
 * the compiled pattern (RE2 instructions), summed over every `pattern` and
 * `patternProperties` test. RE2's time is linear in the text but also in the pattern's
 * program: a 553-instruction pattern held the event loop (every tenant's requests) for
 * seconds on a 400 KB argument. Five million is about a hundred milliseconds at worst, and
 * far more than schemas written for tool arguments need (a 10-instruction pattern on 500,000
 * characters).
 */
export const MAX_PATTERN_WORK = 5_000_000;

/** A validation that would do more pattern matching than MAX_PATTERN_WORK: stopped before the test that would pass it. */
export class PatternWorkExceeded extends Error {
  override readonly name = 'PatternWorkExceeded';
}

/** The pattern work left to the validation running now (validations are synchronous, so one at a time); null outside runValidator. */
let patternWorkLeft: number | null = null;

/** A compiled pattern's size in RE2 instructions (re2js keeps its program as `re2Input.prog`); the pattern's length when that is not there. */
function programSize(re: RE2JS, pattern: string): number {
  const prog = (re as unknown as { re2Input?: { prog?: { numInst?: () => number } } }).re2Input?.prog;
  return Math.max(1, typeof prog?.numInst === 'function' ? prog.numInst() : pattern.length);
}

/**
 * `pattern` and `patternProperties` run in RE2 (re2js: time linear in the input), not in
 * JavaScript's backtracking engine: a schema is written by any organization, and a pattern
 * such as `^(a+)+$` would otherwise hold the event loop (every tenant's requests) for hours on
 * a forty-character argument. RE2 has no lookaround or backreferences: a pattern using them
 * does not compile, so the schema is refused when saved. Each test is paid for from the
 * validation's pattern work before it runs.
 */
const linearRegExp = Object.assign(
  (pattern: string, flags: string) => {
    const re = RE2JS.compile(pattern, flags.includes('i') ? RE2JS.CASE_INSENSITIVE : 0);
    const size = programSize(re, pattern);
    return {
      // Ajv shares one compiled pattern among the tests of the same source and flags (its key).
      toString: () => `/${pattern}/${flags}`,
      test(text: string): boolean {
        if (patternWorkLeft !== null) {
          patternWorkLeft -= text.length * size;
          if (patternWorkLeft < 0) throw new PatternWorkExceeded();
        }
        return re.test(text);
      },
    };
  },
  // What Ajv would write into standalone code (never generated here).
  { code: 'require("re2js").RE2JS.compile' },
);

/** JSON text of a value with object members in order: equal JSON values, equal keys. */
function canonical(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(canonical).join(',')}]`;
  if (value !== null && typeof value === 'object') {
    const obj = value as Record<string, unknown>;
    return `{${Object.keys(obj)
      .sort()
      .map((k) => `${JSON.stringify(k)}:${canonical(obj[k])}`)
      .join(',')}}`;
  }
  return JSON.stringify(value) ?? 'null';
}

/**
 * `uniqueItems` in time linear in the array (each item's canonical JSON in a map): Ajv's own
 * compares every pair of items that are not all of one scalar type, and 40,000 of them held
 * the event loop for seconds.
 */
function uniqueItems(this: unknown, schema: boolean, data: unknown[]): boolean {
  const self = uniqueItems as typeof uniqueItems & { errors?: Partial<ErrorObject>[] };
  self.errors = [];
  if (!schema) return true;
  const seen = new Map<string, number>();
  for (const [i, item] of data.entries()) {
    const key = canonical(item);
    const j = seen.get(key);
    if (j !== undefined) {
      self.errors = [{ keyword: 'uniqueItems', params: { i, j }, message: `must NOT have duplicate items (items ## ${j} and ${i} are identical)` }];
      return false;
    }
    seen.set(key, i);
  }
  return true;
}

function newAjv(useDefaults = true) {
  const ajv = new Ajv2020({ strict: false, allErrors: true, useDefaults, validateFormats: true, code: { regExp: linearRegExp } });
  addFormats(ajv);
  ajv.removeKeyword('uniqueItems');
  ajv.addKeyword({ keyword: 'uniqueItems', type: 'array', schemaType: 'boolean', errors: true, validate: uniqueItems });
  return ajv;
}

/**
 * Runs a validator within MAX_PATTERN_WORK: its answer, or PatternWorkExceeded (thrown) when
 * the value would need more pattern matching than that.
 */
export function runValidator(validate: ValidateFunction, value: unknown): boolean {
  patternWorkLeft = MAX_PATTERN_WORK;
  try {
    return validate(value);
  } finally {
    patternWorkLeft = null;
  }
}

const checker = newAjv();

/** Problems of a schema written at `at`: size, meta-schema, type object, compiles. */
export function schemaProblems(schema: unknown, at: string): MappingProblem[] {
  if (JSON.stringify(schema).length > MAX_SCHEMA_BYTES) return [{ pointer: at, message: 'is larger than 64 KiB' }];
  const declared = (schema as { $schema?: unknown }).$schema;
  if (declared !== undefined && declared !== 'https://json-schema.org/draft/2020-12/schema') {
    return [{ pointer: joinPointer(at, '$schema'), message: 'must be https://json-schema.org/draft/2020-12/schema (or left out): schemas are draft 2020-12' }];
  }
  let valid: boolean;
  try {
    valid = checker.validateSchema(schema as object) as boolean;
  } catch (err) {
    return [{ pointer: at, message: `is not a valid JSON Schema: ${err instanceof Error ? err.message : String(err)}` }];
  }
  if (!valid) {
    return (checker.errors ?? []).slice(0, 10).map((e) => ({ pointer: at + e.instancePath, message: `is not a valid JSON Schema: ${e.message ?? 'invalid'}` }));
  }
  if ((schema as { type?: unknown }).type !== 'object') return [{ pointer: joinPointer(at, 'type'), message: 'must be "object"' }];
  try {
    newAjv().compile(schema as object);
  } catch (err) {
    return [{ pointer: at, message: `does not compile: ${err instanceof Error ? err.message : String(err)}` }];
  }
  return [];
}

const compiled = new Map<string, ValidateFunction>();
const MAX_COMPILED = 500;

/**
 * The validator of a stored schema, compiled once per `key` (tool id, which schema, and its
 * version). `applyDefaults`: fill in the schema's defaults (arguments), or leave the value as
 * it is (the output).
 */
export function validatorFor(key: string, schema: object, applyDefaults = true): ValidateFunction {
  let validate = compiled.get(key);
  if (!validate) {
    validate = newAjv(applyDefaults).compile(schema);
    if (compiled.size >= MAX_COMPILED) compiled.delete(compiled.keys().next().value as string);
    compiled.set(key, validate);
  }
  return validate;
}

/** Ajv's errors as problems under `base` (`/arguments`). */
export function problemsOf(errors: ErrorObject[] | null | undefined, base: string): MappingProblem[] {
  return (errors ?? []).map((e) => {
    const missing = e.keyword === 'required' ? joinPointer('', String((e.params as { missingProperty?: string }).missingProperty ?? '')) : '';
    return { pointer: base + e.instancePath + missing, message: e.message ?? 'is not valid' };
  });
}
