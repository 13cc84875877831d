// partrain.toml(5) documents exactly the keys the code accepts, each with its default.
// The page is read as roff: under `.SH "SITE CONFIGURATION"` and `.SH "JOB FILE"`, each
// `.SS "[table]"` holds one `.TP` entry per key whose tag line is `\fBkey\fR ...`.
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "config/job_config.h"
#include "config/site_config.h"
#include "test_util.h"

#ifndef PARTRAIN_MAN_TOML5
#error "PARTRAIN_MAN_TOML5 (the path of man/partrain.toml.5) must be defined by the build"
#endif
#ifndef PARTRAIN_SOURCE_DIR
#error "PARTRAIN_SOURCE_DIR must be defined by the build"
#endif

namespace partrain::config {
namespace {

using testing::slurp;

struct ManEntry {
  std::string body;  // the paragraph after the tag line
};

// "SITE" or "JOB" -> "table.key" -> entry.
using ManKeys = std::map<std::string, std::map<std::string, ManEntry>>;

bool is_macro(const std::string& line, const char* name) {
  const std::string m = std::string(".") + name;
  return line.rfind(m, 0) == 0 && (line.size() == m.size() || line[m.size()] == ' ');
}

ManKeys read_man_page(const std::string& path, std::vector<std::string>* problems) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << "cannot read " << path;
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);

  ManKeys keys;
  std::string section, table;
  ManEntry* open_entry = nullptr;
  for (size_t i = 0; i < lines.size(); ++i) {
    const std::string& line = lines[i];
    if (is_macro(line, "SH")) {
      section = line.find("SITE CONFIGURATION") != std::string::npos ? "SITE"
                : line.find("JOB FILE") != std::string::npos       ? "JOB"
                                                                    : "";
      table.clear();
      open_entry = nullptr;
    } else if (is_macro(line, "SS")) {
      const size_t lb = line.find('['), rb = line.find(']');
      table = (lb != std::string::npos && rb != std::string::npos) ? line.substr(lb + 1, rb - lb - 1)
                                                                   : "";
      open_entry = nullptr;
    } else if (is_macro(line, "TP") && !section.empty() && !table.empty() && i + 1 < lines.size()) {
      const std::string& tag = lines[++i];
      const size_t b = tag.find("\\fB"), r = tag.find("\\fR");
      if (tag.rfind("\\fB", 0) != 0 || r == std::string::npos) {
        problems->push_back("tag line without \\fBkey\\fR: " + tag);
        open_entry = nullptr;
        continue;
      }
      const std::string key = table + "." + tag.substr(b + 3, r - b - 3);
      if (keys[section].count(key)) problems->push_back("documented twice: " + key);
      open_entry = &keys[section][key];
    } else if (!line.empty() && line[0] == '.' && !is_macro(line, "B") && !is_macro(line, "I") &&
               !is_macro(line, "BR") && !is_macro(line, "IR") && !is_macro(line, "RS") &&
               !is_macro(line, "RE") && !is_macro(line, "nf") && !is_macro(line, "fi") &&
               !is_macro(line, "br") && !is_macro(line, "EX") && !is_macro(line, "EE")) {
      open_entry = nullptr;  // .PP, .IP, ...: the entry's paragraph ended
    } else if (open_entry != nullptr) {
      open_entry->body += line + "\n";
    }
  }
  return keys;
}

void expect_same_keys(const std::map<std::string, ManEntry>& documented,
                      const std::vector<std::string>& accepted, const std::string& what) {
  std::set<std::string> accepted_set(accepted.begin(), accepted.end());
  for (const auto& key : accepted) {
    EXPECT_TRUE(documented.count(key))
        << what << " key '" << key << "' is accepted by the code but missing from "
        << PARTRAIN_MAN_TOML5;
  }
  for (const auto& [key, entry] : documented) {
    EXPECT_TRUE(accepted_set.count(key))
        << what << " key '" << key << "' is documented in partrain.toml(5) but not accepted";
    EXPECT_NE(entry.body.find("Default:"), std::string::npos)
        << what << " key '" << key << "' does not state its default";
  }
}

TEST(ManPage, EveryAcceptedKeyIsDocumentedWithItsDefault) {
  std::vector<std::string> problems;
  ManKeys keys = read_man_page(PARTRAIN_MAN_TOML5, &problems);
  EXPECT_TRUE(problems.empty()) << problems.front();
  expect_same_keys(keys["SITE"], known_site_keys(), "site config");
  expect_same_keys(keys["JOB"], known_job_keys(), "job file");
}

TEST(ManPage, HasTheSlurmManPageSections) {
  std::ifstream in(PARTRAIN_MAN_TOML5);
  std::set<std::string> sections;
  for (std::string line; std::getline(in, line);) {
    if (is_macro(line, "SH")) {
      std::string name = line.substr(4);
      if (!name.empty() && name.front() == '"') name = name.substr(1, name.size() - 2);
      sections.insert(name);
    }
  }
  for (const char* s : {"NAME", "DESCRIPTION", "SITE CONFIGURATION", "JOB FILE", "EXAMPLE",
                        "FILES", "SEE ALSO"}) {
    EXPECT_TRUE(sections.count(s)) << "partrain.toml(5) lacks section " << s;
  }
}

const std::filesystem::path kSource = PARTRAIN_SOURCE_DIR;

// The EXAMPLE section's two files (between .nf and .fi): a site config, then a job file.
// Both must load, and the job must be the 64-GPU seed example's batch arithmetic.
TEST(ManPage, ExamplesAreValidFiles) {
  std::istringstream page(slurp(PARTRAIN_MAN_TOML5));
  std::vector<std::string> blocks;
  bool in_example = false, in_block = false;
  for (std::string line; std::getline(page, line);) {
    if (is_macro(line, "SH")) in_example = line == ".SH EXAMPLE";
    if (!in_example) continue;
    if (is_macro(line, "nf")) {
      in_block = true;
      blocks.emplace_back();
    } else if (is_macro(line, "fi")) {
      in_block = false;
    } else if (in_block && !is_macro(line, "RS") && !is_macro(line, "RE")) {
      for (size_t at; (at = line.find("\\-")) != std::string::npos;) line.replace(at, 2, "-");
      blocks.back() += line + "\n";
    }
  }
  ASSERT_EQ(blocks.size(), 2u);
  auto site = parse_site(blocks[0], "example-site.toml");
  EXPECT_TRUE(site.is_ok()) << site.status().message();
  auto job = parse_job(blocks[1], "example-job.toml");
  ASSERT_TRUE(job.is_ok()) << job.status().message();
  EXPECT_EQ(job->parallelism.tp, 4);
  EXPECT_EQ(job->parallelism.pp, 2);
  EXPECT_EQ(*grad_accum_steps(*job, 8), 8);  // 256 = 4 x 8 x dp 8
  EXPECT_EQ(job->plugin_tables.count("myschedule"), 1u);
}

// partrain(1)'s EXIT STATUS has one entry per code in daemon/common/exit_codes.h, and no other.
TEST(ManPage, PartrainOneListsEveryExitCode) {
  const std::string codes = slurp(kSource / "daemon/common/exit_codes.h");
  const std::string page = slurp(kSource / "man/partrain.1");
  const std::regex constant(R"(constexpr int kExit\w+ = (\d+);)");
  std::set<std::string> from_code;
  for (std::sregex_iterator it(codes.begin(), codes.end(), constant), end; it != end; ++it) {
    from_code.insert((*it)[1].str());
  }
  ASSERT_GE(from_code.size(), 4u);
  const size_t begin = page.find(".SH \"EXIT STATUS\"");
  ASSERT_NE(begin, std::string::npos);
  const std::string section = page.substr(begin, page.find("\n.SH ", begin + 1) - begin);
  const std::regex entry(R"(\.TP\n\\fB(\d+)\\fR)");
  std::set<std::string> documented;
  for (std::sregex_iterator it(section.begin(), section.end(), entry), end; it != end; ++it) {
    documented.insert((*it)[1].str());
  }
  EXPECT_EQ(documented, from_code);
}

// Every subcommand the CLI registers (add_subcommand("NAME", ...) in daemon/cli/cmd_*.cc)
// has an entry in partrain(1)'s COMMANDS section.
TEST(ManPage, PartrainOneDescribesEverySubcommand) {
  const std::string page = slurp(kSource / "man/partrain.1");
  const size_t begin = page.find(".SH COMMANDS");
  ASSERT_NE(begin, std::string::npos);
  const std::string section = page.substr(begin, page.find("\n.SH ", begin + 1) - begin);
  // The words of each entry's bold tag: `.TP` then `\fBdata encode\fR ...` -> data, encode.
  std::set<std::string> tagged;
  const std::regex tag(R"(\.TP\n\\fB([^\\\n]+)\\fR)");
  for (std::sregex_iterator it(section.begin(), section.end(), tag), end; it != end; ++it) {
    std::istringstream words((*it)[1].str());
    for (std::string w; words >> w;) tagged.insert(w);
  }
  const std::regex registered(R"re(add_subcommand\(\s*"([a-z0-9-]+)")re");
  int count = 0;
  for (const auto& file : std::filesystem::directory_iterator(kSource / "daemon/cli")) {
    const std::string name = file.path().filename().string();
    if (name.rfind("cmd_", 0) != 0 || file.path().extension() != ".cc") continue;
    const std::string code = slurp(file.path());
    for (std::sregex_iterator it(code.begin(), code.end(), registered), end; it != end; ++it) {
      const std::string sub = (*it)[1].str();
      ++count;
      EXPECT_TRUE(tagged.count(sub)) << "subcommand '" << sub << "' (" << name
                         << ") has no entry under COMMANDS in man/partrain.1";
    }
  }
  EXPECT_GE(count, 1);
}

}  // namespace
}  // namespace partrain::config
