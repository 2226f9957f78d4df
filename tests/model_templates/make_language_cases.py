"""Writes language_cases.json: small templates covering each construct of the supported Jinja
subset, with the output (or the failure) of Python's Jinja2 configured as transformers'
apply_chat_template configures it (python_reference.py). src/model/jinja_test.cc renders every
case with our interpreter and requires the same text, or an error where Jinja2 fails.

The expected values come from Jinja2, not from our code: rerun this script (python3 with
jinja2 installed) after changing the cases.

Cases avoid the few places where our values intentionally print differently from Python
(generators and dict views print as lists here; see docs/formats/chat-templates.md).
"""

import datetime
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import importlib.util

spec = importlib.util.spec_from_file_location(
    "python_reference", os.path.join(os.path.dirname(os.path.abspath(__file__)), "python_reference.py"))

# python_reference.py runs main() on import; load only its environment factory.
source = open(spec.origin, encoding="utf-8").read().replace("\nmain()\n", "\n")
namespace = {"__name__": "python_reference"}
exec(compile(source, spec.origin, "exec"), namespace)
make_environment = namespace["make_environment"]
strip_markers = namespace["strip_markers"]

NOW_MS = 1741530600000  # 2025-03-09 14:30:00 UTC

CONTEXT = {
    "d": {"a": 1, "b": [2, 3], "name": "x", "nested": {"k": "v"}},
    "l": [1, 2, 3, 4],
    "s": "hello",
    "u": "héllo wörld",
    "f": 2.5,
    "n": None,
    "t": True,
    "users": [
        {"name": "bob", "age": 31, "role": "user", "tags": ["a"]},
        {"name": "Alice", "age": 25, "role": "admin", "tags": []},
        {"name": "carol", "age": 31, "role": "user"},
    ],
    "messages": [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "  hi  "},
        {"role": "assistant", "content": "yo", "tool_calls": [{"function": {"name": "f", "arguments": {"x": 1}}}]},
    ],
}

CASES = [
    # --- Output, literals, printing ---
    ("text_only", "plain text"),
    ("string_literals", "{{ 'a' }}{{ \"b\" }}{{ 'it' 's' }}|{{ \"q'uote\" }}"),
    ("string_escapes", r"{{ 'tab\there\nnew' }}|{{ '\x41\u00e9\U0001F600' }}|{{ '\101' }}|{{ 'a\\b' }}|{{ '\d' }}"),
    ("numbers", "{{ 1 }} {{ 1.5 }} {{ 1e3 }} {{ 1_000 }} {{ 0x1F }} {{ 0o17 }} {{ 0b101 }} {{ 1.0 }} {{ 0.1 + 0.2 }}"),
    ("float_formatting", "{{ 1e16 }} {{ 1e15 }} {{ 1e-5 }} {{ 0.0001 }} {{ 10 / 4 }} {{ 2 ** 0.5 }} {{ -0.0 }} {{ 3.0 * 2 }} {{ 1 / 3 }}"),
    ("constants", "{{ true }} {{ True }} {{ false }} {{ none }} {{ None }} {{ n }} {{ t }}"),
    ("containers_print_as_python", "{{ [1, 'a', none, true, 1.5] }} {{ (1,) }} {{ (1, 2) }} {{ {'a': 1, 'b': [2]} }} {{ [] }} {{ {} }} {{ () }}"),
    ("repr_quotes", "{{ [\"it's\", 'say \"hi\"', 'nl\\n', 'tab\\t', 'back\\\\slash'] }}"),
    ("context_values", "{{ d }} {{ l }} {{ s }} {{ f }}"),
    ("undefined_prints_empty", "[{{ missing }}][{{ d.nokey }}][{{ l[10] }}][{{ missing is defined }}][{{ d.nokey is undefined }}]"),
    ("dict_literal_nesting", "{{ {'a': {'b': {'c': [1, {'d': 2}]}}}['a']['b']['c'][1]['d'] }}"),
    ("tuple_in_print", "{{ 1, 2 }}"),

    # --- Whitespace control and the transformers environment ---
    ("trim_and_lstrip_blocks", "{% if true %}\n  yes\n{% endif %}\n  {% if true %}x{% endif %}\nend"),
    ("dash_strips_everything", "a  {%- if true -%}  b  {%- endif -%}  c\n\n{{- '|' -}}\n\n d"),
    ("comments", "a {# comment #} b\n  {#- stripped -#}  c\n    {# lstripped #}\nd"),
    ("plus_disables_lstrip", "x\n    {%+ if true %}y{% endif %}"),
    ("plus_disables_trim", "{% if true +%}\nkept newline{% endif %}"),
    ("lstrip_not_for_expressions", "line\n    {{ 'x' }}\n    {% if true %}y{% endif %}"),
    ("raw_block", "{% raw %}{{ not rendered }} {% if %}{% endraw %}|{%- raw -%}  spaced  {%- endraw -%}|"),
    ("trailing_newline_removed", "a\n"),
    ("only_one_trailing_newline_removed", "a\n\n"),
    ("crlf_newlines", "a\r\nb\rc{% if true %}\r\nd{% endif %}"),
    ("for_with_trim_blocks", "{% for x in [1, 2] %}\n  {{ x }}\n{% endfor %}\n"),

    # --- Operators ---
    ("arithmetic", "{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7.5 // 2 }} {{ 2 ** 10 }} {{ 2 ** -1 }} {{ -2 ** 2 }} {{ 3 - 5 }} {{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ true + 1 }} {{ 7 % -3 }} {{ 5.5 % 2 }}"),
    ("string_operators", "{{ 'a' + 'b' }} {{ 'a' ~ 1 ~ none ~ true ~ missing }} {{ 'ab' * 3 }} {{ 3 * 'x' }} {{ [1] * 3 }} {{ [1] + [2] }} {{ 'x' ~ 2 * 3 }} {{ (1, 2) + (3,) }}"),
    ("comparisons", "{{ 1 < 2 < 3 }} {{ 1 < 3 < 2 }} {{ 'a' < 'b' }} {{ [1, 2] < [1, 3] }} {{ 1 == 1.0 }} {{ 'a' != 'b' }} {{ none == none }} {{ 1 == true }} {{ 2 >= 2 }} {{ 'B' < 'a' }} {{ [1] == [1] }} {{ {'a': 1} == {'a': 1} }} {{ (1,) == [1] }}"),
    ("membership", "{{ 'b' in 'abc' }} {{ 2 in [1, 2] }} {{ 'k' in {'k': 1} }} {{ 'z' not in 'abc' }} {{ 'x' in missing }} {{ 'a' in d }} {{ 1 in d }} {{ '' in 'abc' }}"),
    ("logic_returns_operands", "{{ 0 or 'x' }} {{ 1 and 'y' }} {{ [] or none }} {{ not 0 }} {{ not 1 and 0 }} {{ '' and 1 }} {{ missing or 'fallback' }}"),
    ("precedence", "{{ not 1 == 2 }} {{ -3 | abs }} {{ 'a' + ' b ' | trim }} {{ 2 * 3 ** 2 }} {{ 10 - 2 - 3 }} {{ 100 / 10 / 2 }} {{ not 'a' in 'abc' }}"),
    ("inline_if", "{{ 'y' if 1 else 'n' }} {{ 'y' if 0 else 'n' }} [{{ 'y' if 0 }}] {{ 'a' if 0 else 'b' if 0 else 'c' }}"),
    ("unary", "{{ -5 }} {{ +5 }} {{ -(-5) }} {{ - 2.5 }} {{ not none }} {{ -true }}"),

    # --- Attribute and item access, slices ---
    ("access", "{{ d.a }} {{ d['a'] }} {{ l[0] }} {{ l[-1] }} {{ l.0 }} {{ s[1] }} {{ s[-1] }} {{ d.nested.k }} {{ d['nested']['k'] }} {{ users[1].name }} {{ u[1] }}"),
    ("missing_items_are_undefined", "{{ l[10] is defined }} {{ d.zz is defined }} {{ s[99] is defined }} {{ none.x is defined }} {{ 5.x is defined }} {{ d[1] is defined }}"),
    ("slices", "{{ l[1:] }} {{ l[:-1] }} {{ l[::-1] }} {{ l[::2] }} {{ s[1:3] }} {{ s[::-1] }} {{ u[1:4] }} {{ l[5:] }} {{ l[-100:2] }} {{ l[3:1:-1] }} {{ s[:] }} {{ l[none:2] }}"),
    ("dict_methods", "{{ d.get('a') }} {{ d.get('zz', 'dflt') }} {{ d.get('zz') }} {{ d.items() | list }} {{ d.keys() | list }} {{ d.values() | list }} {{ d['get']('a') }}"),
    ("dict_keys_win_over_items", "{% set x = {'items': 'key'} %}{{ x['items'] }} {{ x.items() | list }}"),
    ("string_methods_case", "{{ 'hello world'.title() }} {{ 'hELLO wORLD'.capitalize() }} {{ 'Mixed'.upper() }} {{ 'Mixed'.lower() }} {{ 'ab-cd ef_gh'.title() }} {{ 'aBc'.swapcase() }} {{ 'éa'.upper() }} {{ 'ÀÉ'.lower() }}"),
    ("string_methods_strip", "[{{ '  a  '.strip() }}][{{ '  a  '.lstrip() }}][{{ '  a  '.rstrip() }}][{{ 'xxaxx'.strip('x') }}][{{ '\\n\\t a \\u3000'.strip() }}][{{ 'abcab'.strip('ab') }}]"),
    ("string_methods_split", "{{ '  a  b  '.split() }} {{ 'a,b,,c'.split(',') }} {{ 'a b c'.split(none, 1) }} {{ 'a,b,c'.rsplit(',', 1) }} {{ 'l1\\nl2\\r\\nl3'.splitlines() }} {{ ''.split() }} {{ 'a  b'.rsplit(none, 1) }} {{ 'a,b'.split(',', 0) }}"),
    ("string_methods_search", "{{ 'hello'.startswith('he') }} {{ 'hello'.startswith(('x', 'h')) }} {{ 'hello'.endswith('lo') }} {{ 'hello'.find('l') }} {{ 'hello'.rfind('l') }} {{ 'hello'.find('z') }} {{ 'hello'.count('l') }} {{ 'héllo'.find('l') }} {{ 'hello'.index('e') }} {{ 'hello'.startswith('l', 2) }}"),
    ("string_methods_misc", "{{ 'a-b-c'.replace('-', '+') }} {{ 'a-b-c'.replace('-', '+', 1) }} {{ 'ab'.replace('', '.') }} {{ ', '.join(['a', 'b']) }} {{ '-'.join('xyz') }} {{ '12'.isdigit() }} {{ '1a'.isdigit() }} {{ 'ab'.isalpha() }} {{ ' \\t'.isspace() }} {{ 'abc'.islower() }} {{ 'ABC'.isupper() }} {{ '42'.zfill(5) }} {{ 'ab'.center(6, '*') }} {{ 'ab'.ljust(4, '.') }}|{{ 'ab'.rjust(4) }}"),
    ("list_methods", "{{ [1, 2, 2].count(2) }} {{ ['a', 'b'].index('b') }}"),

    # --- Control structures ---
    ("if_elif_else", "{% for x in [1, 2, 3] %}{% if x == 1 %}one{% elif x == 2 %}two{% else %}many{% endif %},{% endfor %}"),
    ("loop_variables", "{% for x in ['a', 'b', 'c'] %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}|{% endfor %}"),
    ("loop_neighbours_and_cycle", "{% for x in [1, 2, 3] %}{{ loop.cycle('odd', 'even') }}:{{ loop.previtem }}:{{ loop.nextitem }};{% endfor %}"),
    ("for_else", "{% for x in [] %}x{% else %}empty{% endfor %}|{% for x in missing %}x{% else %}undefined-is-empty{% endfor %}|{% for x in [1] %}{{ x }}{% else %}no{% endfor %}"),
    ("for_filter", "{% for x in range(10) if x is even %}{{ x }}/{{ loop.index }}/{{ loop.length }},{% endfor %}"),
    ("for_unpacking", "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}|{% for a, b in [[1, 2], [3, 4]] %}{{ a + b }}{% endfor %}|{% for k in d %}{{ k }}{% endfor %}|{% for c in 'héy' %}{{ c }}.{% endfor %}|{% for (a, b) in [(1, 2)] %}{{ a }}{{ b }}{% endfor %}"),
    ("break_continue", "{% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 5 %}{% break %}{% endif %}{{ x }}{% endfor %}"),
    ("loop_scoping", "{% set x = 1 %}{% for i in [1] %}{% set x = 2 %}{{ x }}{% endfor %}{{ x }}"),
    ("loop_body_resets_each_iteration", "{% set y = 'outer' %}{% for i in [1, 2] %}{% if loop.first %}{% set y = 'set' %}{% endif %}[{{ y }}]{% endfor %}"),
    ("namespace", "{% set ns = namespace(c=0, seen=[]) %}{% for i in range(3) %}{% set ns.c = ns.c + i %}{% endfor %}{{ ns.c }} {{ ns.seen }} {{ ns.missing is defined }}"),
    ("namespace_from_dict", "{% set ns = namespace({'a': 1}, b=2) %}{{ ns.a }}{{ ns.b }}"),
    ("nested_loops", "{% for a in [1, 2] %}{% for b in [3] %}{{ loop.index }}{% endfor %}{{ loop.index }}{% endfor %}"),
    ("set_forms", "{% set a, b = 1, 2 %}{{ a }}{{ b }}|{% set x %}  hi {{ 1 }}  {% endset %}[{{ x }}]|{% set y | upper | trim %} shout {% endset %}[{{ y }}]"),
    ("set_shadows_context", "{{ s }}{% set s = 'changed' %}{{ s }}"),
    ("filter_block", "{% filter upper %}abc{{ 'd' }}{% endfilter %}|{% filter trim | title %}  two words  {% endfilter %}"),
    ("macros", "{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}{{ greet('Bob') }} {{ greet('Al', punct='?') }} {{ greet(name='Z') }}"),
    ("macro_varargs_kwargs", "{% macro m(a) %}{{ a }}{{ varargs }}{{ kwargs }}{% endmacro %}{{ m(1, 2, 3, k=4) }}"),
    ("macro_missing_argument", "{% macro m(a, b) %}[{{ b }}][{{ b is defined }}]{% endmacro %}{{ m(1) }}"),
    ("macro_default_uses_earlier_argument", "{% macro m(a, b=a * 2) %}{{ a }},{{ b }}{% endmacro %}{{ m(3) }}"),
    ("macro_recursion", "{% macro f(n) %}{% if n <= 1 %}1{% else %}{{ n * (f(n - 1) | int) }}{% endif %}{% endmacro %}{{ f(6) }}"),
    ("macro_sees_globals", "{% set g = 'G' %}{% macro m() %}{{ g }}{{ s }}{% endmacro %}{{ m() }}"),
    ("call_blocks", "{% macro wrap() %}<{{ caller() }}>{% endmacro %}{% call wrap() %}inner{% endcall %}|{% macro each(items) %}{% for i in items %}{{ caller(i) }}{% endfor %}{% endmacro %}{% call(x) each([1, 2]) %}[{{ x }}]{% endcall %}"),
    ("generation_block", "{% for m in messages %}{% if m.role == 'assistant' %}A:{% generation %}{{ m.content }}!{% endgeneration %}{% else %}{{ m.role }}:{{ m.content }}{% endif %};{% endfor %}"),

    # --- Filters ---
    ("filter_abs_round", "{{ -3 | abs }} {{ -2.5 | abs }} {{ 2.567 | round }} {{ 2.567 | round(2) }} {{ 2.5 | round }} {{ 3.5 | round }} {{ 2.1 | round(0, 'ceil') }} {{ 2.9 | round(method='floor') }} {{ 42 | round }}"),
    ("filter_string_case", "{{ 'hello WORLD' | capitalize }} {{ 'hello world-wide (x)' | title }} {{ 'Ab' | upper }} {{ 'Ab' | lower }} {{ 'a b  c' | wordcount }} {{ 'x' | center(5) }}|"),
    ("filter_default", "{{ missing | default('d') }} {{ none | default('d') }} {{ '' | default('d') }} {{ '' | default('d', true) }} {{ 0 | d('zero', boolean=true) }} {{ missing | default }}|{{ d.nokey | default(d.a) }}"),
    ("filter_escape", "{{ '<a href=\"x\">&\\'</a>' | escape }} {{ '<b>' | e }} {{ '<i>' | safe }}"),
    ("filter_first_last", "{{ l | first }} {{ l | last }} {{ 'abc' | first }} {{ 'abc' | last }} {{ [] | first is defined }} {{ d | first }}"),
    ("filter_numbers", "{{ '42' | int }} {{ '4.7' | int }} {{ 'x' | int }} {{ 'x' | int(7) }} {{ '0x1A' | int(base=16) }} {{ 3.9 | int }} {{ -3.9 | int }} {{ '2.5' | float }} {{ 'nan' | float }} {{ 'x' | float }} {{ true | int }} {{ ' 12 ' | int }} {{ '1_000' | int }}"),
    ("filter_indent", "{{ 'a\\nb\\n\\nc' | indent }}|{{ 'a\\nb' | indent(2, true) }}|{{ 'a\\n\\nb' | indent(2, blank=true) }}|{{ 'a\\nb' | indent('> ') }}|{{ 'a\\n' | indent }}|"),
    ("filter_items_dictsort", "{{ d | items | list }} {{ {'b': 1, 'A': 2, 'c': 0} | dictsort }} {{ {'b': 1, 'A': 2, 'c': 0} | dictsort(true) }} {{ {'b': 1, 'A': 2, 'c': 0} | dictsort(by='value') }} {{ {'b': 1, 'a': 2} | dictsort(reverse=true) }} {{ missing | items | list }}"),
    ("filter_join", "{{ ['a', 'b'] | join }} {{ ['a', 'b'] | join(', ') }} {{ [1, none, true] | join('-') }} {{ users | join(',', attribute='name') }} {{ 'abc' | join('.') }} {{ missing | join(',') }}|"),
    ("filter_length", "{{ l | length }} {{ 'héllo' | length }} {{ d | count }} {{ missing | length }} {{ [] | length }}"),
    ("filter_list_reverse", "{{ 'abc' | list }} {{ d | list }} {{ (1, 2) | list }} {{ l | reverse | list }} {{ 'héllo' | reverse }} {{ missing | list }}"),
    ("filter_map", "{{ users | map(attribute='name') | list }} {{ users | map(attribute='tags.0', default='-') | list }} {{ ['a', 'B'] | map('upper') | list }} {{ [' x ', 'y '] | map('trim') | join('|') }} {{ users | map(attribute='age') | sum }}"),
    ("filter_min_max_sum", "{{ [3, 1, 2] | min }} {{ [3, 1, 2] | max }} {{ ['b', 'A', 'c'] | min }} {{ ['b', 'A', 'c'] | max(case_sensitive=true) }} {{ users | max(attribute='age') }} {{ [] | max is defined }} {{ [1, 2.5] | sum }} {{ [[1], [2]] | sum(start=[]) }} {{ users | sum(attribute='age') }}"),
    ("filter_select_reject", "{{ range(6) | select('odd') | list }} {{ range(6) | reject('odd') | list }} {{ [0, 1, '', 'a', none] | select | list }} {{ ['a', 'b', 'a'] | reject('equalto', 'a') | list }} {{ [1, 5, 9] | select('gt', 4) | list }} {{ [1, 5, 9] | select('divisibleby', 3) | list }}"),
    ("filter_selectattr", "{{ users | selectattr('role', 'equalto', 'user') | map(attribute='name') | list }} {{ users | rejectattr('age', 'lt', 30) | map(attribute='name') | list }} {{ users | selectattr('tags') | map(attribute='name') | list }} {{ users | selectattr('tags', 'defined') | list | length }} {{ messages | selectattr('tool_calls', 'defined') | list | length }}"),
    ("filter_sort_unique", "{{ [3, 1, 2] | sort }} {{ ['b', 'A', 'c'] | sort }} {{ ['b', 'A', 'c'] | sort(case_sensitive=true) }} {{ [3, 1, 2] | sort(reverse=true) }} {{ users | sort(attribute='age') | map(attribute='name') | list }} {{ users | sort(attribute='age,name') | map(attribute='name') | list }} {{ ['a', 'A', 'b', 'a'] | unique | list }} {{ ['a', 'A'] | unique(case_sensitive=true) | list }}"),
    ("filter_string_trim_replace", "[{{ '  x  ' | trim }}][{{ 'xxyxx' | trim('x') }}][{{ 'aaa' | replace('a', 'b') }}][{{ 'aaa' | replace('a', 'b', 2) }}][{{ 42 | string }}][{{ none | string }}][{{ [1] | string }}][{{ missing | trim }}]"),
    ("filter_batch_attr", "{{ range(5) | batch(2) | list }} {{ range(5) | batch(2, 'x') | list }} {{ 'abc' | attr('upper') is defined }} {{ d | attr('a') is defined }}"),
    ("filter_tojson", "{{ d | tojson }}|{{ [1, 'a', none, true, 2.5] | tojson }}|{{ 'é\"\\n' | tojson }}|{{ 'é' | tojson(ensure_ascii=true) }}|{{ {'b': 1, 'a': [1, {'c': {}}], 'e': []} | tojson(indent=2) }}|{{ {'b': 1, 'a': 2} | tojson(sort_keys=true) }}|{{ [1, {'a': 2}] | tojson(separators=(',', ':')) }}|{{ 1.0 | tojson }}|{{ 1e20 | tojson }}|{{ {'x': [1, 2]} | tojson(indent='\\t') }}|{{ [] | tojson(indent=4) }}|{{ {'k': 'v'} | tojson(indent=0) }}"),
    ("filter_tojson_unicode_controls", "{{ 'a\\x01b\\x7fc\\u2028d😀' | tojson }}|{{ '😀' | tojson(ensure_ascii=true) }}"),

    # --- Tests ---
    ("tests_types", "{{ 1 is integer }} {{ true is integer }} {{ 1.0 is float }} {{ 1 is number }} {{ true is number }} {{ 'a' is string }} {{ d is mapping }} {{ l is mapping }} {{ l is iterable }} {{ 's' is iterable }} {{ 1 is iterable }} {{ d is sequence }} {{ none is none }} {{ true is boolean }} {{ true is true }} {{ false is false }} {{ 0 is false }}"),
    ("tests_undefined_quirks", "{{ missing is iterable }} {{ missing is sequence }} {{ missing is callable }} {{ missing is string }} {{ missing is none }} {{ range is callable }} {{ d.get is callable }}"),
    ("tests_numbers", "{{ 4 is even }} {{ 3 is odd }} {{ 9 is divisibleby(3) }} {{ 9 is divisibleby 4 }} {{ 4.0 is even }}"),
    ("tests_comparisons", "{{ 1 is eq 1 }} {{ 1 is equalto(2) }} {{ 1 is ne 2 }} {{ 1 is lt 2 }} {{ 1 is lessthan 0 }} {{ 2 is le 2 }} {{ 3 is gt 2 }} {{ 3 is greaterthan(4) }} {{ 3 is ge 3 }} {{ 2 is in [1, 2] }} {{ 'x' is in 'abc' }}"),
    ("tests_misc", "{{ 'abc' is lower }} {{ 'ABC' is upper }} {{ 'Abc' is lower }} {{ 'upper' is filter }} {{ 'nope' is filter }} {{ 'odd' is test }} {{ none is sameas none }} {{ true is sameas true }} {{ 1 is not none }} {{ not missing is defined }} {{ 'a' is escaped }}"),

    # --- Globals ---
    ("range", "{{ range(3) | list }} {{ range(1, 5) | list }} {{ range(10, 0, -3) | list }} {{ range(0) | list }} {{ range(5, 1) | list }}"),
    ("dict_global", "{{ dict(a=1, b='x') }} {{ dict({'a': 1}, c=3) }} {{ dict() }}"),
    ("strftime_now", "{{ strftime_now('%d %b %Y') }}|{{ strftime_now('%Y-%m-%d %H:%M:%S') }}|{{ strftime_now('%A %B %j %y %p %I %%') }}"),

    # --- Errors (Jinja2 raises; we must fail too) ---
    ("error_undefined_attribute", "{{ missing.x }}"),
    ("error_undefined_item", "{{ missing[0] }}"),
    ("error_undefined_arithmetic", "{{ missing + 1 }}"),
    ("error_undefined_call", "{{ missing() }}"),
    ("error_undefined_comparison", "{{ missing < 1 }}"),
    ("error_add_str_int", "{{ 'a' + 1 }}"),
    ("error_add_int_str", "{{ 1 + 'a' }}"),
    ("error_division_by_zero", "{{ 1 / 0 }}"),
    ("error_modulo_by_zero", "{{ 1 % 0 }}"),
    ("error_ordering_mixed_types", "{{ [1] < 'a' }}"),
    ("error_iterate_int", "{% for x in 5 %}{% endfor %}"),
    ("error_in_int", "{{ 'a' in 1 }}"),
    ("error_in_string_needs_string", "{{ 1 in 'abc' }}"),
    ("error_raise_exception", "{{ raise_exception('boom: ' ~ 42) }}"),
    ("error_range_step_zero", "{{ range(1, 2, 0) }}"),
    ("error_tojson_undefined", "{{ missing | tojson }}"),
    ("error_unpack_count", "{% set a, b = [1] %}"),
    ("error_call_non_callable", "{{ s() }}"),
    ("error_sort_mixed", "{{ [1, 'a'] | sort }}"),
    ("error_length_of_int", "{{ 5 | length }}"),
    ("error_namespace_assignment_on_dict", "{% set x = {} %}{% set x.a = 1 %}"),
    ("error_immutable_list", "{{ l.append(5) }}"),
    ("error_macro_too_many_arguments", "{% macro m(a) %}{% endmacro %}{{ m(1, 2) }}"),
    ("error_macro_unknown_keyword", "{% macro m(a) %}{% endmacro %}{{ m(b=1) }}"),
    ("error_split_empty_separator", "{{ 'a'.split('') }}"),
    ("error_int_of_undefined", "{{ missing | int }}"),
    ("error_unhashable_in_dict", "{{ [1] in d }}"),
]


def main():
    now = datetime.datetime.fromtimestamp(NOW_MS / 1000, tz=datetime.timezone.utc)
    env = make_environment(now)
    out = []
    for name, template in CASES:
        case = {"name": name, "template": template}
        try:
            text = env.from_string(template).render(**CONTEXT)
            text, spans = strip_markers(text)
            case["expected"] = text
            if spans:
                case["generation"] = spans
        except Exception as e:
            case["error"] = f"{type(e).__name__}: {e}"
        out.append(case)
    doc = {
        "comment": "Generated by make_language_cases.py from Python Jinja2 " +
                   __import__("jinja2").__version__ + " configured as transformers does; do not edit.",
        "now_ms": NOW_MS,
        "context": CONTEXT,
        "cases": out,
    }
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "language_cases.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=1, ensure_ascii=False)
        f.write("\n")
    errors = sum(1 for c in out if "error" in c)
    print(f"{len(out)} cases ({errors} errors) written to {path}")


main()
