# man.cmake -- the man pages, made from what the project already says, so
# none is a hand copy that drifts:
#   skipq(1)         from the binary's help texts (`skipq --help`, then
#                    `skipq COMMAND --help` for every command it lists);
#   skipq.ini(5)     from the option table (`skipq config --reference`, the
#                    markdown docs/configuration.md's tables come from);
#   skipq-plugin(7)  from docs/plugins.md.
# Each page is written as roff and gzipped (-9n: no name or time inside), as
# Debian installs man pages.
#
#   cmake -DPAGE=skipq.1|skipq.ini.5|skipq-plugin.7 -DSKIPQ=path/to/skipq
#         -DSOURCE=source-dir -DOUT=dir -DVERSION=x.y.z -P man.cmake
cmake_minimum_required(VERSION 3.25)
string(TIMESTAMP date "%Y-%m-%d" UTC) # SOURCE_DATE_EPOCH when set

# CMake lists split on ';' and treat brackets specially: both are kept out of
# the way while a page is taken apart line by line.
function(protect var text)
  string(REPLACE ";" "@SC@" text "${text}")
  string(REPLACE "[" "@LB@" text "${text}")
  string(REPLACE "]" "@RB@" text "${text}")
  set(${var} "${text}" PARENT_SCOPE)
endfunction()
function(unprotect var text)
  string(REPLACE "@SC@" ";" text "${text}")
  string(REPLACE "@LB@" "[" text "${text}")
  string(REPLACE "@RB@" "]" text "${text}")
  set(${var} "${text}" PARENT_SCOPE)
endfunction()
function(lines_of var text)
  protect(text "${text}")
  string(REPLACE "\n" ";" text "${text}")
  set(${var} "${text}" PARENT_SCOPE)
endfunction()

# Plain text made safe for roff: backslashes, minus signs (so options copy
# as typed), and a '.' or '\'' at the start of a line.
function(roff_escape var text)
  string(REPLACE "\\" "\\e" text "${text}")
  string(REPLACE "-" "\\-" text "${text}")
  string(REGEX REPLACE "^([.'])" "\\\\&\\1" text "${text}")
  set(${var} "${text}" PARENT_SCOPE)
endfunction()

# A line of markdown as roff: `code` and **bold** in bold, a link as its text.
function(md_inline var text)
  roff_escape(text "${text}")
  string(REGEX REPLACE "`([^`]*)`" "\\\\fB\\1\\\\fR" text "${text}")
  string(REGEX REPLACE "\\*\\*([^*]+)\\*\\*" "\\\\fB\\1\\\\fR" text "${text}")
  string(REGEX REPLACE "@LB@([^@]*)@RB@\\(([^)]*)\\)" "\\1" text "${text}")
  set(${var} "${text}" PARENT_SCOPE)
endfunction()

# A markdown table row "| a | b | c |" as a list of cells.
function(md_cells var line)
  string(REGEX REPLACE "^\\| *" "" line "${line}")
  string(REGEX REPLACE " *\\| *$" "" line "${line}")
  string(REGEX REPLACE " *\\| *" ";" line "${line}")
  set(${var} "${line}" PARENT_SCOPE)
endfunction()

# Markdown (as this project writes it) to roff: headings (the first "# "
# is the page's own title and is dropped), paragraphs, "- " and "1. " lists,
# fenced code, and tables, each row a tagged paragraph: the first cell the
# tag, the middle cells "column: value", the last the text. A paragraph or
# list item is gathered whole first, as a `code` span may cross a line.
macro(md_flush)
  if(NOT pending STREQUAL "")
    md_inline(t "${pending}")
    string(APPEND out "${t}\n")
    set(pending "")
  endif()
endmacro()
function(md_to_roff var md)
  lines_of(lines "${md}")
  set(out "")
  set(pending "")
  set(state "") # para, item, code, table
  set(header "")
  foreach(l IN LISTS lines)
    if(state STREQUAL "code")
      if(l MATCHES "^```")
        string(APPEND out ".fi\n.RE\n")
        set(state "")
      else()
        roff_escape(e "${l}")
        string(APPEND out "${e}\n")
      endif()
      continue()
    endif()
    set(item "")
    if(l MATCHES "^(- |[0-9]+\\. )(.*)$")
      set(item "${CMAKE_MATCH_1}")
      set(rest "${CMAKE_MATCH_2}")
    endif()
    if(l MATCHES "^ *$|^[|#]|^```" OR NOT item STREQUAL "" OR NOT state MATCHES "para|item")
      md_flush()
    endif()
    if(l MATCHES "^```")
      string(APPEND out ".PP\n.RS 4\n.nf\n")
      set(state "code")
    elseif(l MATCHES "^# ")
      set(state "")
    elseif(l MATCHES "^(##+) (.*)$")
      string(LENGTH "${CMAKE_MATCH_1}" depth)
      md_inline(h "${CMAKE_MATCH_2}")
      if(depth EQUAL 2)
        string(TOUPPER "${h}" h)
        string(REPLACE "\\FB" "\\fB" h "${h}")
        string(REPLACE "\\FR" "\\fR" h "${h}")
        string(APPEND out ".SH \"${h}\"\n")
      else()
        string(APPEND out ".SS \"${h}\"\n")
      endif()
      set(state "")
    elseif(l MATCHES "^\\|")
      md_cells(cells "${l}")
      if(NOT state STREQUAL "table")
        set(header "${cells}")
        set(state "table")
      elseif(NOT l MATCHES "^\\|[-|: ]*$")
        list(LENGTH cells n)
        math(EXPR last "${n} - 1")
        list(GET cells 0 tag)
        list(GET cells ${last} text)
        md_inline(tag "${tag}")
        set(facts "")
        if(last GREATER 1)
          math(EXPR mid "${last} - 1")
          foreach(i RANGE 1 ${mid})
            list(GET cells ${i} v)
            list(GET header ${i} k)
            if(NOT v STREQUAL "")
              md_inline(v "${v}")
              md_inline(k "${k}")
              string(APPEND facts "${k}: ${v}@SC@ ")
            endif()
          endforeach()
          string(REGEX REPLACE "@SC@ $" "" facts "${facts}")
        endif()
        md_inline(text "${text}")
        string(APPEND out ".TP\n${tag}\n")
        if(NOT facts STREQUAL "")
          string(APPEND out "(${facts})\n.br\n")
        endif()
        string(APPEND out "${text}\n")
      endif()
    elseif(l MATCHES "^ *$")
      set(state "")
    elseif(NOT item STREQUAL "")
      if(item STREQUAL "- ")
        string(APPEND out ".IP \\(bu 2\n")
      else()
        string(APPEND out ".IP ${item} 4\n")
      endif()
      set(pending "${rest}")
      set(state "item")
    else()
      string(STRIP "${l}" l)
      if(state STREQUAL "")
        string(APPEND out ".PP\n")
        set(state "para")
      endif()
      if(pending STREQUAL "")
        set(pending "${l}")
      else()
        string(APPEND pending " ${l}")
      endif()
    endif()
  endforeach()
  md_flush()
  unprotect(out "${out}")
  set(${var} "${out}" PARENT_SCOPE)
endfunction()

# ---- skipq(1) from the help texts --------------------------------------------------------

function(run_skipq var)
  execute_process(COMMAND ${CMAKE_COMMAND} -E env ASAN_OPTIONS=detect_leaks=0 ${SKIPQ} ${ARGN}
                  OUTPUT_VARIABLE o ERROR_VARIABLE e RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0 OR o STREQUAL "")
    message(FATAL_ERROR "man.cmake: `skipq ${ARGN}` failed (${rc}): ${e}")
  endif()
  set(${var} "${o}" PARENT_SCOPE)
endfunction()

# One help text as roff: "usage:" lines verbatim, option lists ("  -x, --long
# ARG   text" with deeper-indented continuations) as tagged paragraphs, any
# other block of lines as a filled paragraph.
function(help_to_roff var text)
  lines_of(lines "${text}")
  set(out "")
  set(state "")
  foreach(l IN LISTS lines)
    set(tag "")
    if(l MATCHES "^  +(-[A-Za-z0-9], |-[A-Za-z0-9])?(--[a-z-]+)?( [A-Z][A-Z:_.]*)?  +(.*)$")
      set(tag "${CMAKE_MATCH_1}${CMAKE_MATCH_2}")
      set(arg "${CMAKE_MATCH_3}")
      set(text "${CMAKE_MATCH_4}")
    endif()
    if(l MATCHES "^ *$")
      if(state STREQUAL "usage")
        string(APPEND out ".fi\n")
      endif()
      set(state "")
    elseif(l MATCHES "^usage: (.*)$|^       (skipq .*)$")
      roff_escape(e "${CMAKE_MATCH_1}${CMAKE_MATCH_2}")
      if(NOT state STREQUAL "usage")
        string(APPEND out ".PP\n.nf\n")
        set(state "usage")
      endif()
      string(APPEND out "${e}\n")
    elseif(NOT tag STREQUAL "")
      roff_escape(t "${text}")
      roff_escape(tag "${tag}")
      string(STRIP "${arg}" arg)
      if(state STREQUAL "usage")
        string(APPEND out ".fi\n")
      endif()
      if(arg STREQUAL "")
        string(APPEND out ".TP\n.B ${tag}\n${t}\n")
      else()
        string(APPEND out ".TP\n\\fB${tag}\\fR \\fI${arg}\\fR\n${t}\n")
      endif()
      set(state "option")
    else()
      string(STRIP "${l}" s)
      roff_escape(t "${s}")
      if(state STREQUAL "usage")
        string(APPEND out ".fi\n")
        set(state "")
      endif()
      if(state STREQUAL "option" AND NOT l MATCHES "^ ")
        set(state "") # unindented after an option list: a paragraph of its own
      endif()
      if(state STREQUAL "")
        string(APPEND out ".PP\n")
        set(state "para")
      endif()
      string(APPEND out "${t}\n")
    endif()
  endforeach()
  if(state STREQUAL "usage")
    string(APPEND out ".fi\n")
  endif()
  unprotect(out "${out}")
  set(${var} "${out}" PARENT_SCOPE)
endfunction()

function(page_skipq var)
  run_skipq(top --help)
  # The commands: the lines "  NAME   what it does" after "commands:".
  string(REGEX MATCH "commands:\n(([ ]+[a-z]+ [^\n]*\n)+)" m "${top}")
  string(REGEX MATCHALL "\n?  ([a-z]+)  +([^\n]*)" rows "${CMAKE_MATCH_1}")
  string(REGEX MATCH "common options:\n(([ ]+[^\n]*\n)+)" m "${top}")
  help_to_roff(common "${CMAKE_MATCH_1}")
  string(REGEX MATCH "exit status: ([^\n]*)" m "${top}")
  roff_escape(status "${CMAKE_MATCH_1}")
  set(cmds "")
  foreach(r IN LISTS rows)
    string(REGEX MATCH "([a-z]+)  +(.*)$" m "${r}")
    set(name "${CMAKE_MATCH_1}")
    roff_escape(what "${CMAKE_MATCH_2}")
    run_skipq(help ${name} --help)
    help_to_roff(body "${help}")
    string(APPEND cmds ".SS \"skipq ${name}\"\n${what}.\n${body}")
  endforeach()
  set(${var} ".SH NAME
skipq \\- a job queue in PostgreSQL: host, command line and dashboard
.SH SYNOPSIS
.B skipq
.I COMMAND
.RI [ OPTIONS ]
.SH DESCRIPTION
skipq keeps jobs as rows in PostgreSQL. \\fBskipq run\\fR is a host: it loads
the plugins its INI file names and runs threads that claim jobs and hand them
to the plugins' handlers. The other commands migrate the schema, add jobs,
show what the queue holds, act on jobs, and serve a dashboard. Each command
takes \\fB\\-\\-help\\fR.
.SH COMMANDS
${cmds}.SH \"COMMON OPTIONS\"
${common}.SH \"EXIT STATUS\"
${status}.
.SH ENVIRONMENT
.TP
.B DATABASE_URL
the database when neither \\fB\\-\\-db\\fR nor the INI file's [database] names one.
.TP
.BR PGHOST \", \" PGPORT \", \" PGDATABASE \", \" PGUSER \", ...\"
libpq's variables, used last.
.SH FILES
.TP
.I ${ETC}/skipq/skipq.ini
the host's configuration: every key, commented (\\fBskipq.ini\\fR(5)).
.TP
.I ${PLUGINS}
the example plugins.
.TP
.I ${SQL}
the schema's migrations, for reading (\\fBskipq migrate\\fR has them compiled in).
.TP
.I ${UNIT}/skipq.service
the systemd unit, installed but not enabled.
.SH \"SEE ALSO\"
\\fBskipq.ini\\fR(5), \\fBskipq\\-plugin\\fR(7), \\fBsystemctl\\fR(1);
the guides in \\fI${DOCS}\\fR.
" PARENT_SCOPE)
endfunction()

# ---- skipq.ini(5) and skipq-plugin(7) ----------------------------------------------------

function(page_ini var)
  run_skipq(ref config --reference)
  md_to_roff(body "${ref}")
  set(${var} ".SH NAME
skipq.ini \\- the configuration file of a skipq host
.SH SYNOPSIS
.I ${ETC}/skipq/skipq.ini
.SH DESCRIPTION
\\fBskipq run \\-c\\fR \\fIFILE\\fR reads one INI file: sections of
\"key = value\" lines. A line starting with ';' or '#' is a comment, and
\" ;\" starts a comment after a value. An unknown section or key, a duplicate,
or a bad value stops the host with \"FILE:LINE: what is wrong\" and exit
status 2. SIGHUP re-reads the file: the keys marked live change at once;
any other difference is logged as needing a restart.
.PP
Durations are a number of seconds, or a number with ms, s, m (or min), h, d.
Sizes are a number of bytes, or a number with KiB, MiB or GiB.
The installed file shows every key, at least commented out.
${body}.SH \"SEE ALSO\"
\\fBskipq\\fR(1), \\fBskipq\\-plugin\\fR(7)
" PARENT_SCOPE)
endfunction()

function(page_plugin var)
  file(READ ${SOURCE}/docs/plugins.md md)
  md_to_roff(body "${md}")
  set(${var} ".SH NAME
skipq\\-plugin \\- writing a plugin for skipq: handlers in a shared object
.SH SYNOPSIS
.nf
.B #include <skipq/plugin.h>
.PP
cc $(pkg\\-config \\-\\-cflags skipq\\-plugin) $(pkg\\-config \\-\\-variable=plugin_cflags skipq\\-plugin) \\e
   hello.c \\-o hello.so $(pkg\\-config \\-\\-libs skipq\\-plugin)
.fi
.SH DESCRIPTION
${body}.SH \"SEE ALSO\"
\\fBskipq\\fR(1), \\fBskipq.ini\\fR(5); the template in \\fI${DOCS}/template\\fR
" PARENT_SCOPE)
endfunction()

# ---- main --------------------------------------------------------------------------------

string(REGEX MATCH "^(.*)\\.([0-9])$" m "${PAGE}")
set(stem "${CMAKE_MATCH_1}")
set(section "${CMAKE_MATCH_2}")
if(PAGE STREQUAL "skipq.1")
  page_skipq(body)
elseif(PAGE STREQUAL "skipq.ini.5")
  page_ini(body)
elseif(PAGE STREQUAL "skipq-plugin.7")
  page_plugin(body)
else()
  message(FATAL_ERROR "man.cmake: no page ${PAGE}")
endif()
string(TOUPPER "${stem}" title)
string(REPLACE "-" "\\-" title "${title}")
file(WRITE ${OUT}/${PAGE} ".\\\" generated by cmake/man.cmake: do not edit
.TH \"${title}\" ${section} ${date} \"skipq ${VERSION}\" \"skipq manual\"
${body}")
execute_process(COMMAND gzip -9nc ${OUT}/${PAGE} OUTPUT_FILE ${OUT}/${PAGE}.gz RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "man.cmake: gzip ${OUT}/${PAGE} failed (${rc})")
endif()
